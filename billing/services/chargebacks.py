"""Refunds and disputes of a paid invoice's charge, as Stripe's webhooks report them.

A charge is ours when its PaymentIntent is one a succeeded attempt recorded (the charge's
metadata is whatever its creator wrote). A refund gives the money back and issues a credit
note of it, so charges, credit notes and what was kept still add up; a dispute holds the
money until it closes and holds back the organization's new work
(``selectors.payment_refusal``); a lost one leaves the amount owed and dunning resumes.

Concurrency: each locks the ``Invoice`` row, then appends (``invoice_stream``); a refund's
credit note is a stream of its own (``NO_STREAM``), appended under the same lock.
"""

from __future__ import annotations

from django.utils import timezone

from billing import events as ev
from billing.models import Invoice, InvoicePayment, InvoiceStatus
from billing.services import invoice_stream
from billing.services.corrections import credit_note_append
from tenants.access import Actor

# Stripe's closed statuses that leave the money with us (``warning_closed``: an inquiry that
# never became a chargeback).
DISPUTE_KEPT = frozenset({"won", "warning_closed"})


def _paid_by(payment_intent_id: str) -> tuple[Invoice, InvoicePayment] | None:
    """The locked invoice and the succeeded attempt that recorded this PaymentIntent."""
    if not payment_intent_id:
        return None
    found = InvoicePayment.objects.filter(
        payment_intent_id=payment_intent_id, status="succeeded"
    ).first()
    if found is None:
        return None
    invoice = invoice_stream.locked(found.invoice_id)
    return invoice, invoice.payments.get(pk=found.pk)


def charge_refund_record(
    *,
    actor: Actor,
    stripe_event_id: str,
    payment_intent_id: str,
    currency: str,
    amount_refunded: object,
) -> str:
    """Record what Stripe refunded of a payment; returns what it did. ``amount_refunded`` is
    the charge's running total, so a delivery older than one already recorded adds nothing.
    A refund of everything kept turns the invoice ``refunded``; a partial one keeps it paid."""
    paid = _paid_by(payment_intent_id)
    if paid is None:
        return "ignored: not a payment of ours"
    invoice, payment = paid
    if invoice.status not in {InvoiceStatus.PAID, InvoiceStatus.REFUNDED}:
        return f"ignored: invoice is {invoice.status}"
    if currency != invoice.currency.lower() or not (
        isinstance(amount_refunded, int) and 0 <= amount_refunded <= payment.amount_minor
    ):
        return (
            f"refused: refund of {amount_refunded} {currency} does not fit attempt"
            f" {payment.attempt}'s {payment.amount_minor} {invoice.currency.lower()}"
        )
    amount = amount_refunded - payment.refunded_minor
    if amount <= 0:
        return f"ignored: {payment.refunded_minor} already refunded"
    full = invoice.paid_minor <= amount
    # A note never credits more than the invoice's total (an operator's note may have
    # credited part of it already, as prepaid credit).
    note = min(amount, invoice.total_minor - invoice.credited_minor)
    if note > 0:
        credit_note_append(
            actor=actor,
            invoice=invoice,
            amount_minor=note,
            reason=f"refunded through Stripe ({payment_intent_id})",
        )
    invoice_stream.append(
        actor,
        invoice,
        [
            ev.InvoiceRefunded(
                attempt=payment.attempt,
                payment_intent_id=payment_intent_id,
                amount_minor=amount,
                payment_refunded_minor=amount_refunded,
                full=full,
                stripe_event_id=stripe_event_id,
            )
        ],
    )
    return "refunded" if full else f"refunded {amount} of {payment.amount_minor}"


def charge_dispute_open(
    *,
    actor: Actor,
    stripe_event_id: str,
    dispute_id: str,
    payment_intent_id: str,
    amount: object,
    reason: str,
) -> str:
    """A paid invoice's payment is disputed: the invoice is ``disputed`` until it closes."""
    paid = _paid_by(payment_intent_id)
    if paid is None:
        return "ignored: not a payment of ours"
    invoice, payment = paid
    if invoice.status != InvoiceStatus.PAID:
        return f"ignored: invoice is {invoice.status}"
    kept = payment.amount_minor - payment.refunded_minor
    held = min(amount, kept) if isinstance(amount, int) and amount > 0 else kept
    invoice_stream.append(
        actor,
        invoice,
        [
            ev.InvoiceDisputed(
                dispute_id=dispute_id,
                payment_intent_id=payment_intent_id,
                amount_minor=held,
                reason=reason,
                stripe_event_id=stripe_event_id,
            )
        ],
    )
    return "disputed"


def charge_dispute_close(
    *, actor: Actor, stripe_event_id: str, dispute_id: str, payment_intent_id: str, status: str
) -> str:
    """Won: paid again. Lost: the disputed amount is owed again and dunning tries the card
    now, on its usual schedule after that. Any other status changes nothing."""
    paid = _paid_by(payment_intent_id)
    if paid is None:
        return "ignored: not a payment of ours"
    invoice, _ = paid
    if invoice.status != InvoiceStatus.DISPUTED:
        return f"ignored: invoice is {invoice.status}"
    if status not in DISPUTE_KEPT | {"lost"}:
        return f"ignored: dispute closed as {status}"
    won = status in DISPUTE_KEPT
    invoice_stream.append(
        actor,
        invoice,
        [
            ev.InvoiceDisputeClosed(
                dispute_id=dispute_id,
                won=won,
                amount_minor=invoice.disputed_minor,
                next_attempt_at=None if won else timezone.now(),
                stripe_event_id=stripe_event_id,
            )
        ],
    )
    return "dispute won" if won else "dispute lost"
