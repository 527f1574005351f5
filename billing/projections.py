"""The billing tables, kept from the billing streams inside each append (synchronous), so an
invoice read right after a write is the invoice the log says."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F

from billing import events as ev
from billing.models import (
    BillingAccount,
    CreditGrant,
    CreditNote,
    DisputeStatus,
    Invoice,
    InvoiceLine,
    InvoicePayment,
    InvoiceStatus,
)
from events import projections
from events.projections import handles
from events.store import RecordedEvent

CREDIT_KINDS = ("promotional_credit", "prepaid_credit")


class Billing(projections.Projection):
    name = "billing.billing"
    models = (BillingAccount, CreditGrant, Invoice, InvoiceLine, InvoicePayment, CreditNote)

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        invoices: dict[str, RecordedEvent] = {}
        accounts: dict[str, RecordedEvent] = {}
        for event in events:
            self.apply(event)
            if event.stream_type == ev.INVOICE_STREAM:
                invoices[event.stream_id] = event
            elif event.stream_type == ev.ACCOUNT_STREAM:
                accounts[event.stream_id] = event
        # The stream's version: what the next write must expect.
        for invoice_id, last in invoices.items():
            Invoice.objects.filter(pk=invoice_id).update(
                version=last.version, updated_at=last.recorded_at
            )
        for organization_id, last in accounts.items():
            BillingAccount.objects.filter(organization_id=organization_id).update(
                version=last.version
            )

    # --- accounts and credits ---

    @handles(ev.BillingProfileSet)
    def profile_set(self, event: RecordedEvent) -> None:
        data = event.data
        BillingAccount.objects.update_or_create(
            organization_id=data["organization_id"],
            defaults={
                "billing_country": data["billing_country"],
                "currency": data["currency"],
                "minimum_commitment_minor": data["minimum_commitment_minor"],
            },
            create_defaults={
                "billing_country": data["billing_country"],
                "currency": data["currency"],
                "minimum_commitment_minor": data["minimum_commitment_minor"],
                "version": event.version,
            },
        )

    @handles(ev.StripeCustomerCreated)
    def customer_created(self, event: RecordedEvent) -> None:
        BillingAccount.objects.filter(organization_id=event.stream_id).update(
            stripe_customer_id=event.data["customer_id"]
        )

    @handles(ev.PaymentMethodSet)
    def payment_method_set(self, event: RecordedEvent) -> None:
        BillingAccount.objects.filter(organization_id=event.stream_id).update(
            payment_method_id=event.data["payment_method_id"],
            payment_method_brand=event.data["brand"],
            payment_method_last4=event.data["last4"],
        )

    @handles(ev.CreditGranted)
    def credit_granted(self, event: RecordedEvent) -> None:
        data = event.data
        CreditGrant.objects.create(
            id=data["credit_id"],
            organization_id=event.stream_id,
            kind=data["kind"],
            amount_minor=data["amount_minor"],
            remaining_minor=data["amount_minor"],
            currency=data["currency"],
            reason=data["reason"],
            granted_at=event.recorded_at,
            position=event.position,
        )

    # --- invoices ---

    @handles(ev.InvoiceDrafted)
    def drafted(self, event: RecordedEvent) -> None:
        data = event.data
        figures = {
            "organization_id": data["organization_id"],
            "number": data["number"],
            "period": data["period"],
            "period_start": data["period_start"],
            "period_end": data["period_end"],
            "currency": data["currency"],
            "billing_country": data["billing_country"],
            "tax_rate_percent": data["tax_rate_percent"],
            "subtotal_minor": data["subtotal_minor"],
            "credits_minor": data["credits_minor"],
            "tax_minor": data["tax_minor"],
            "total_minor": data["total_minor"],
        }
        invoice, _ = Invoice.objects.update_or_create(
            id=data["invoice_id"],
            defaults=figures,
            create_defaults={
                **figures,
                "status": InvoiceStatus.DRAFT,
                "version": event.version,
                "created_at": event.recorded_at,
                "updated_at": event.recorded_at,
            },
        )
        InvoiceLine.objects.filter(invoice=invoice).delete()
        InvoiceLine.objects.bulk_create(
            InvoiceLine(
                invoice=invoice,
                position=position,
                kind=line["kind"],
                description=line["description"],
                amount_minor=line["amount_minor"],
                source=line["source"],
                project_id=line["project_id"],
                offering=line["offering"] or "",
                gpu_model=line["gpu_model"] or "",
                price_plan=line["price_plan"] or "",
                region=line["region"] or "",
                milli_gpu_seconds=line["milli_gpu_seconds"],
                unit_price_minor=line["unit_price_minor"],
                allocation_ids=line["allocation_ids"],
            )
            for position, line in enumerate(data["lines"], start=1)
        )

    @handles(ev.InvoiceFinalized)
    def finalized(self, event: RecordedEvent) -> None:
        invoice = Invoice.objects.get(pk=event.stream_id)
        invoice.status = InvoiceStatus.FINALIZED
        invoice.finalized_at = event.data["finalized_at"]
        invoice.next_attempt_at = event.data["finalized_at"] if invoice.total_minor else None
        invoice.save(update_fields=["status", "finalized_at", "next_attempt_at"])
        self._use_credits(invoice, sign=1)

    @staticmethod
    def _use_credits(invoice: Invoice, *, sign: int) -> None:
        """Finalizing uses the credits its lines name; voiding gives them back."""
        for source, amount in invoice.lines.filter(kind__in=CREDIT_KINDS).values_list(
            "source", "amount_minor"
        ):
            CreditGrant.objects.filter(pk=source.removeprefix("credit/")).update(
                remaining_minor=F("remaining_minor") + sign * amount
            )

    @handles(ev.InvoicePaymentAttempted)
    def attempted(self, event: RecordedEvent) -> None:
        data = event.data
        InvoicePayment.objects.create(
            invoice_id=event.stream_id,
            attempt=data["attempt"],
            status="pending",
            amount_minor=data["amount_minor"],
            payment_method_id=data["payment_method_id"],
            attempted_at=event.recorded_at,
        )
        Invoice.objects.filter(pk=event.stream_id).update(payment_attempts=data["attempt"])

    @handles(ev.InvoicePaid)
    def paid(self, event: RecordedEvent) -> None:
        data = event.data
        Invoice.objects.filter(pk=event.stream_id).update(
            status=InvoiceStatus.PAID,
            paid_at=event.recorded_at,
            paid_minor=F("paid_minor") + data["amount_minor"],
            next_attempt_at=None,
        )
        InvoicePayment.objects.filter(invoice_id=event.stream_id, attempt=data["attempt"]).update(
            status="succeeded",
            payment_intent_id=data["payment_intent_id"],
            code="",
            message="",
            settled_at=event.recorded_at,
        )

    @handles(ev.InvoicePaymentFailed)
    def failed(self, event: RecordedEvent) -> None:
        data = event.data
        Invoice.objects.filter(pk=event.stream_id).update(
            payment_failures=F("payment_failures") + 1, next_attempt_at=data["next_attempt_at"]
        )
        InvoicePayment.objects.filter(invoice_id=event.stream_id, attempt=data["attempt"]).update(
            status="failed",
            payment_intent_id=data["payment_intent_id"],
            code=data["code"],
            message=data["message"][:500],
            settled_at=event.recorded_at,
        )

    @handles(ev.InvoicePaymentProcessing)
    def processing(self, event: RecordedEvent) -> None:
        InvoicePayment.objects.filter(
            invoice_id=event.stream_id, attempt=event.data["attempt"]
        ).update(payment_intent_id=event.data["payment_intent_id"])

    @handles(ev.InvoiceMarkedUncollectible)
    def uncollectible(self, event: RecordedEvent) -> None:
        Invoice.objects.filter(pk=event.stream_id).update(
            status=InvoiceStatus.UNCOLLECTIBLE,
            status_reason=event.data["reason"],
            next_attempt_at=None,
        )

    @handles(ev.InvoiceVoided)
    def voided(self, event: RecordedEvent) -> None:
        invoice = Invoice.objects.get(pk=event.stream_id)
        if invoice.status != InvoiceStatus.DRAFT:
            self._use_credits(invoice, sign=-1)
        Invoice.objects.filter(pk=invoice.pk).update(
            status=InvoiceStatus.VOID, status_reason=event.data["reason"], next_attempt_at=None
        )

    @handles(ev.InvoiceRefunded)
    def refunded(self, event: RecordedEvent) -> None:
        data = event.data
        changes: dict[str, object] = {
            "refunded_minor": F("refunded_minor") + data["amount_minor"],
            "paid_minor": F("paid_minor") - data["amount_minor"],
        }
        if data["full"]:
            changes["status"] = InvoiceStatus.REFUNDED
        Invoice.objects.filter(pk=event.stream_id).update(**changes)
        InvoicePayment.objects.filter(invoice_id=event.stream_id, attempt=data["attempt"]).update(
            refunded_minor=data["payment_refunded_minor"]
        )

    @handles(ev.InvoiceDisputed)
    def disputed(self, event: RecordedEvent) -> None:
        Invoice.objects.filter(pk=event.stream_id).update(
            status=InvoiceStatus.DISPUTED,
            dispute_status=DisputeStatus.OPEN,
            disputed_minor=event.data["amount_minor"],
            next_attempt_at=None,
        )

    @handles(ev.InvoiceDisputeClosed)
    def dispute_closed(self, event: RecordedEvent) -> None:
        data = event.data
        invoice = Invoice.objects.filter(pk=event.stream_id)
        if data["won"]:
            invoice.update(status=InvoiceStatus.PAID, dispute_status=DisputeStatus.WON)
            return
        invoice.update(
            status=InvoiceStatus.FINALIZED,
            dispute_status=DisputeStatus.LOST,
            paid_minor=F("paid_minor") - data["amount_minor"],
            paid_at=None,
            next_attempt_at=data["next_attempt_at"],
        )

    @handles(ev.CreditNoteIssued)
    def credit_note(self, event: RecordedEvent) -> None:
        data = event.data
        CreditNote.objects.create(
            id=data["credit_note_id"],
            invoice_id=data["invoice_id"],
            organization_id=data["organization_id"],
            number=data["number"],
            amount_minor=data["amount_minor"],
            currency=data["currency"],
            reason=data["reason"],
            issued_at=event.recorded_at,
        )
        Invoice.objects.filter(pk=data["invoice_id"]).update(
            credited_minor=F("credited_minor") + data["amount_minor"]
        )


projections.register(Billing(), synchronous=True)
