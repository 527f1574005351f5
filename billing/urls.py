"""billing API routes."""

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from billing import api

router = SimpleRouter(trailing_slash=False)
router.register("invoices", api.InvoiceViewSet)
router.register("billing-accounts", api.BillingAccountViewSet)

urlpatterns: list[URLPattern | URLResolver] = [
    path("webhooks/stripe", api.stripe_webhook, name="stripe-webhook"),
    *router.urls,
]
