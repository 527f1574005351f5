from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Rating, invoices, credits, payments through Stripe, webhooks, SLA credits."""

    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import selectors
        from scheduler import hooks

        hooks.payment_check.register(selectors.payment_refusal)
        hooks.gpu_hour_price.register(selectors.gpu_hour_price)
