from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Rating, invoices, credits, payments through Stripe, webhooks, SLA credits."""

    name = "billing"
    verbose_name = "Billing"
