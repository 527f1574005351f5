"""Collecting invoices through Stripe, and dunning: the retries after a failed payment.

Concurrency: every operation runs concurrently with itself. An invoice's payment steps lock
its ``Invoice`` row, then append (``invoice_stream``). Stripe is never called inside a
transaction: ``invoice_collect`` commits the attempt, calls Stripe, and records the outcome in
a second transaction, so a crash in between leaves a pending attempt that is resumed with the
same idempotency key (the same PaymentIntent).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from billing import events as ev
from billing import selectors
from billing.models import (
    OPEN_STATUSES,
    PAYMENT_CLOSED_STATUSES,
    BillingAccount,
    Invoice,
    InvoicePayment,
)
from billing.services import invoice_stream
from billing.stripe_gateway import ChargeOutcome, PaymentGateway, gateway
from events.errors import StreamConflict
from events.types import DomainEvent
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants.access import Action, Actor
from tenants.models import Organization

logger = logging.getLogger(__name__)

SYSTEM = Actor.system_actor("billing")


def _idempotency_key(invoice_id: uuid.UUID, attempt: int) -> str:
    return f"invoice/{invoice_id}/attempt/{attempt}"


def _attempt_start(*, actor: Actor, invoice_id: uuid.UUID) -> InvoicePayment | None:
    """The attempt to make: a pending one (resumed with its key), or a new one. None when
    nothing is to collect."""
    invoice = invoice_stream.locked(invoice_id)
    if invoice.status not in OPEN_STATUSES or invoice.amount_due_minor == 0:
        return None
    pending = invoice.payments.filter(status="pending").first()
    if pending is not None:
        return pending
    account = BillingAccount.objects.filter(organization_id=invoice.organization_id).first()
    attempt = invoice.payment_attempts + 1
    method = account.payment_method_id if account else ""
    events: list[DomainEvent] = [
        ev.InvoicePaymentAttempted(
            attempt=attempt, amount_minor=invoice.amount_due_minor, payment_method_id=method
        )
    ]
    if not (account and account.stripe_customer_id and method):
        events.append(_failure(invoice, attempt, "", "no_payment_method", "no card on file"))
    invoice_stream.append(actor, invoice, events)
    payment = InvoicePayment.objects.get(invoice_id=invoice_id, attempt=attempt)
    return payment if payment.status == "pending" else None


def _failure(
    invoice: Invoice, attempt: int, intent: str, code: str, message: str
) -> ev.InvoicePaymentFailed:
    """Dunning: retry after ``BILLING_DUNNING_RETRY_BASE_S`` doubling per failure; after
    ``BILLING_DUNNING_MAX_FAILURES`` stop retrying (new work is refused until paid)."""
    failures = invoice.payment_failures + 1
    retry = None
    if failures < settings.BILLING_DUNNING_MAX_FAILURES:
        delay = settings.BILLING_DUNNING_RETRY_BASE_S * 2 ** (failures - 1)
        retry = timezone.now() + timedelta(seconds=delay)
    return ev.InvoicePaymentFailed(
        attempt=attempt, payment_intent_id=intent, code=code, message=message, next_attempt_at=retry
    )


def invoice_collect(
    *, actor: Actor, invoice: Invoice, pay: PaymentGateway | None = None
) -> Invoice:
    """Charge what is due on the organization's card: one PaymentIntent per attempt.

    Not in a transaction: the attempt commits, Stripe is called, the outcome commits."""
    actor.require(Action.INVOICE_PAY, Organization.objects.get(pk=invoice.organization_id))
    payment = atomic_with_retry(_attempt_start, actor=actor, invoice_id=invoice.pk)
    if payment is None:
        return Invoice.objects.get(pk=invoice.pk)
    account = BillingAccount.objects.get(organization_id=invoice.organization_id)
    outcome = (pay or gateway()).charge(
        customer_id=account.stripe_customer_id,
        payment_method_id=payment.payment_method_id,
        amount_minor=payment.amount_minor,
        currency=invoice.currency,
        idempotency_key=_idempotency_key(invoice.pk, payment.attempt),
        metadata={"invoice_id": str(invoice.pk), "attempt": str(payment.attempt)},
    )
    atomic_with_retry(
        payment_settle, actor=actor, invoice_id=invoice.pk, attempt=payment.attempt, outcome=outcome
    )
    return Invoice.objects.get(pk=invoice.pk)


def payment_settle(
    *, actor: Actor, invoice_id: uuid.UUID, attempt: int, outcome: ChargeOutcome
) -> str:
    """Record an attempt's outcome, from the charge's answer or a webhook, whichever comes
    first; returns what it did. Stale news changes nothing: a failure of an attempt already
    settled, a success of one already paid (after a dispute lost, it is owed again), anything
    about a paid, refunded, disputed or void invoice. A success after a recorded failure of the
    same attempt still pays the invoice (the money came in). A ``processing`` answer records
    the PaymentIntent, which the webhook that ends it must name."""
    invoice = row_lock(Invoice.objects.all()).filter(pk=invoice_id).first()
    if invoice is None:
        return "ignored: unknown invoice"
    payment = invoice.payments.filter(attempt=attempt).first()
    if payment is None:
        return "ignored: unknown attempt"
    if invoice.status in PAYMENT_CLOSED_STATUSES:
        return f"ignored: invoice is {invoice.status}"
    if outcome.status == "succeeded" and payment.status != "succeeded":
        invoice_stream.append(
            actor,
            invoice,
            [
                ev.InvoicePaid(
                    attempt=attempt,
                    payment_intent_id=outcome.payment_intent_id,
                    amount_minor=payment.amount_minor,
                )
            ],
        )
        return "paid"
    if outcome.status == "failed" and payment.status == "pending":
        invoice_stream.append(
            actor,
            invoice,
            [_failure(invoice, attempt, outcome.payment_intent_id, outcome.code, outcome.message)],
        )
        return "failed"
    if outcome.status == "processing" and not payment.payment_intent_id:
        invoice_stream.append(
            actor,
            invoice,
            [
                ev.InvoicePaymentProcessing(
                    attempt=attempt, payment_intent_id=outcome.payment_intent_id
                )
            ],
        )
        return "processing"
    return f"ignored: attempt {attempt} is {payment.status}"


def collect_due(*, actor: Actor = SYSTEM, now: datetime | None = None) -> int:
    """Dunning's tick: collect invoices whose next attempt is due, and resume attempts left
    pending by a crash or an unreachable Stripe. Returns how many were tried."""
    now = now or timezone.now()
    due = selectors.invoices_to_collect(
        now=now, pending_before=now - timedelta(seconds=settings.BILLING_PENDING_RETRY_S)
    )
    for invoice in Invoice.objects.filter(pk__in=due).order_by("period", "number"):
        try:
            invoice_collect(actor=actor, invoice=invoice)
        except StreamConflict:
            logger.info("invoice %s moved while collecting; next tick", invoice.number)
    return len(due)
