"""Response shapes and request validation of the billing endpoints (no logic here)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from rest_framework import serializers

from billing.models import BillingAccount, CreditNote, Invoice, InvoiceLine, InvoicePayment
from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import StrictCharField


class InvoiceLineSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    amount_minor = serializers.IntegerField(help_text="Signed: credits are negative.")
    allocation_ids = serializers.ListField(child=serializers.UUIDField())

    class Meta:
        model = InvoiceLine
        fields = [
            "position",
            "kind",
            "description",
            "amount_minor",
            "source",
            "project_id",
            "offering",
            "gpu_model",
            "price_plan",
            "region",
            "milli_gpu_seconds",
            "unit_price_minor",
            "allocation_ids",
        ]
        read_only_fields = fields


class InvoicePaymentSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = InvoicePayment
        fields = [
            "attempt",
            "status",
            "amount_minor",
            "payment_intent_id",
            "refunded_minor",
            "code",
            "message",
            "attempted_at",
            "settled_at",
        ]
        read_only_fields = fields


class CreditNoteSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = CreditNote
        fields = ["id", "number", "amount_minor", "currency", "reason", "issued_at"]
        read_only_fields = fields


class InvoiceSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    lines = InvoiceLineSerializer(many=True, read_only=True)
    payments = InvoicePaymentSerializer(many=True, read_only=True)
    credit_notes = CreditNoteSerializer(many=True, read_only=True)
    amount_due_minor = serializers.IntegerField(read_only=True)

    class Meta:
        model = Invoice
        fields = [
            "id",
            "organization",
            "number",
            "period",
            "period_start",
            "period_end",
            "currency",
            "billing_country",
            "tax_rate_percent",
            "status",
            "status_reason",
            "subtotal_minor",
            "credits_minor",
            "tax_minor",
            "total_minor",
            "credited_minor",
            "paid_minor",
            "refunded_minor",
            "disputed_minor",
            "dispute_status",
            "amount_due_minor",
            "payment_attempts",
            "payment_failures",
            "next_attempt_at",
            "finalized_at",
            "paid_at",
            "lines",
            "payments",
            "credit_notes",
        ]
        read_only_fields = fields


class BillingAccountSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = BillingAccount
        fields = [
            "organization",
            "billing_country",
            "currency",
            "minimum_commitment_minor",
            "payment_method_brand",
            "payment_method_last4",
        ]
        read_only_fields = fields


class PaymentMethodSerializer(RequestSerializer):
    payment_method = StrictCharField(
        max_length=64,
        validators=[
            RegexValidator(r"^(pm|card|src)_[A-Za-z0-9_]+$", "not a Stripe PaymentMethod id")
        ],
        help_text="A Stripe PaymentMethod id (from Stripe.js), e.g. pm_…",
    )


class WebhookResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    outcome = serializers.CharField()
