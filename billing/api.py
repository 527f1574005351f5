"""Billing endpoints. Views validate, call one service or selector, and render."""

from __future__ import annotations

from django.http import HttpResponse
from django.template.loader import render_to_string
from django.views.decorators.csrf import csrf_exempt
from django_filters.filterset import filterset_factory
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins
from rest_framework.decorators import (
    action,
    api_view,
    authentication_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.request import Request
from rest_framework.response import Response

from billing import hooks, selectors, services
from billing import serializers as s
from billing.models import BillingAccount, Invoice
from neocloud.core.errors import ApplicationError
from tenants.access import Action
from tenants.viewsets import TenantViewSet


class InvoiceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Invoices of the caller's organizations (owners, admins, billing), with their lines,
    payment attempts and credit notes. Amounts are integer minor units of `currency`."""

    queryset = Invoice.objects.prefetch_related("lines", "payments", "credit_notes")
    serializer_class = s.InvoiceSerializer
    read_action = Action.INVOICE_READ
    filterset_class = filterset_factory(
        Invoice, fields=["organization", "period", "status", "currency"]
    )
    ordering_fields = ["period", "number"]

    @extend_schema(
        responses={(200, "text/html"): OpenApiResponse(description="The invoice as a page.")}
    )
    @action(detail=True, methods=["get"])
    def html(self, request: Request, pk: str) -> HttpResponse:
        """The invoice as a printable HTML page."""
        page = render_to_string("billing/invoice.html", selectors.invoice_page(self.get_object()))
        return HttpResponse(page, content_type="text/html; charset=utf-8")

    @extend_schema(request=None, responses=s.InvoiceSerializer)
    @action(detail=True, methods=["post"])
    def pay(self, request: Request, pk: str) -> Response:
        """Charge what is due now on the card on file (owners, billing). A declined card is
        recorded as a failed attempt, shown in `payments`."""
        invoice = services.invoice_collect(actor=self.actor, invoice=self.get_object())
        return Response(s.InvoiceSerializer(invoice).data)


class BillingAccountViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Billing profiles (country, currency, commitment, card on file), by organization id."""

    queryset = BillingAccount.objects.all()
    serializer_class = s.BillingAccountSerializer
    read_action = Action.INVOICE_READ
    ordering_fields = ["organization"]
    ordering = ["organization"]

    @extend_schema(request=s.PaymentMethodSerializer, responses=s.BillingAccountSerializer)
    @action(
        detail=False,
        methods=["post"],
        url_path=r"(?P<organization_id>[0-9a-f-]{36})/payment-method",
    )
    def payment_method(self, request: Request, organization_id: str) -> Response:
        """Attach a Stripe PaymentMethod to the organization's Stripe customer and charge
        invoices to it (owners, billing). A card Stripe declines is `402 card_declined`."""
        data = self.validated(s.PaymentMethodSerializer, request.data)
        organization = selectors.organization_for_payment(
            actor=self.actor, organization_id=organization_id
        )
        account = services.payment_method_set(
            actor=self.actor, organization=organization, payment_method_id=data["payment_method"]
        )
        return Response(s.BillingAccountSerializer(account).data)


@extend_schema(
    request=None,
    responses={200: s.WebhookResultSerializer, 400: OpenApiResponse(description="Bad signature.")},
    auth=[],
)
@csrf_exempt
@api_view(["POST"])
@authentication_classes([])
@permission_classes([])
@throttle_classes([])
def stripe_webhook(request: Request) -> Response:
    """Stripe's events, signed with `STRIPE_WEBHOOK_SECRET`; each processed once."""
    try:
        outcome = services.stripe_webhook_receive(
            payload=request.body, signature=request.headers.get("Stripe-Signature", "")
        )
    except ApplicationError as exc:
        hooks.webhook_received.call_all("stripe", exc.code, True)
        raise
    hooks.webhook_received.call_all("stripe", outcome, False)
    return Response({"outcome": outcome})
