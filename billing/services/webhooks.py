"""Stripe's webhooks: a PaymentIntent's end settles the attempt it belongs to; a charge's
refund or dispute changes the invoice it paid (``chargebacks``).

Concurrency: each Stripe event is processed once, its id's stream appended in the
transaction of its effects (``stripe_webhook_receive``). Settling locks the ``Invoice`` row,
then appends (``invoice_stream``); a delivery that keeps losing that race is answered 503, so
Stripe delivers it again.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import stripe
from django.db import transaction

from billing import events as ev
from billing.errors import WebhookConflict, WebhookSignatureInvalid
from billing.models import PAYMENT_CLOSED_STATUSES, Invoice
from billing.services import chargebacks, invoice_stream
from billing.services.collection import SYSTEM, payment_settle
from billing.stripe_gateway import ChargeOutcome, webhook_event
from events import store
from events.errors import StreamConflict
from events.store import NO_STREAM, Metadata
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants.access import Actor

# Operators alert on this logger's name (as it was before the services became a package).
logger = logging.getLogger("billing.services")

INTENT_OUTCOMES = {
    "payment_intent.succeeded": "succeeded",
    "payment_intent.payment_failed": "failed",
}


def stripe_webhook_receive(*, payload: bytes, signature: str) -> str:
    """Verify and process one delivery; returns what it did. Each Stripe event is processed
    once: its id is a stream appended with ``NO_STREAM`` in the transaction of its effects, so
    a second delivery (or two at once) finds it and changes nothing."""
    try:
        event = webhook_event(payload, signature)
    except (stripe.SignatureVerificationError, ValueError) as exc:  # ValueError: not JSON
        raise WebhookSignatureInvalid("the webhook's signature does not verify") from exc
    try:
        return atomic_with_retry(_webhook_process, actor=SYSTEM, event=event)
    except StreamConflict as exc:
        # Lost every race: answered 200 only if the delivery that won processed this event.
        if store.stream_version(ev.STRIPE_EVENT_STREAM, str(event.get("id", ""))):
            return "duplicate"
        raise WebhookConflict(
            "the webhook conflicted with concurrent writes and was not processed; deliver it again"
        ) from exc


def _webhook_process(*, actor: Actor, event: dict[str, Any]) -> str:
    event_id, event_type = str(event.get("id", "")), str(event.get("type", ""))
    if store.stream_version(ev.STRIPE_EVENT_STREAM, event_id):
        return "duplicate"
    obj = (event.get("data") or {}).get("object") or {}
    outcome = _event_apply(actor=actor, event_id=event_id, event_type=event_type, obj=obj)
    store.append(
        ev.STRIPE_EVENT_STREAM,
        event_id,
        [
            ev.StripeEventProcessed(
                stripe_event_id=event_id,
                type=event_type,
                object_id=str(obj.get("id", "")),
                outcome=outcome,
            )
        ],
        expected_version=NO_STREAM,
        metadata=Metadata(actor=actor.label),
    )
    return outcome


def _event_apply(*, actor: Actor, event_id: str, event_type: str, obj: dict[str, Any]) -> str:
    """What one event changes: a PaymentIntent's end settles its attempt; a charge's refund
    and dispute change the invoice it paid (``chargebacks``); anything else is recorded."""
    if event_type == "charge.refunded":
        return chargebacks.charge_refund_record(
            actor=actor,
            stripe_event_id=event_id,
            payment_intent_id=_id(obj.get("payment_intent")),
            currency=str(obj.get("currency", "")).lower(),
            amount_refunded=obj.get("amount_refunded"),
        )
    if event_type == "charge.dispute.created":
        return chargebacks.charge_dispute_open(
            actor=actor,
            stripe_event_id=event_id,
            dispute_id=str(obj.get("id", "")),
            payment_intent_id=_id(obj.get("payment_intent")),
            amount=obj.get("amount"),
            reason=str(obj.get("reason") or "")[:200],
        )
    if event_type == "charge.dispute.closed":
        return chargebacks.charge_dispute_close(
            actor=actor,
            stripe_event_id=event_id,
            dispute_id=str(obj.get("id", "")),
            payment_intent_id=_id(obj.get("payment_intent")),
            status=str(obj.get("status", "")),
        )
    if event_type.startswith("charge.dispute."):
        return f"recorded: dispute {obj.get('status', '')}".rstrip()
    metadata = obj.get("metadata") or {}
    invoice_id = _uuid(metadata.get("invoice_id"))
    if event_type not in INTENT_OUTCOMES or invoice_id is None:
        return "ignored: not a payment of ours"
    error = obj.get("last_payment_error") or {}
    return _intent_settle(
        actor=actor,
        stripe_event_id=event_id,
        invoice_id=invoice_id,
        attempt=int(attempt) if (attempt := str(metadata.get("attempt", ""))).isdigit() else 0,
        amount_minor=obj.get("amount"),
        currency=str(obj.get("currency", "")).lower(),
        outcome=ChargeOutcome(
            status=INTENT_OUTCOMES[event_type],
            payment_intent_id=str(obj.get("id", "")),
            code=str(error.get("code") or "payment_failed"),
            message=str(error.get("message") or "payment failed"),
        ),
    )


def _intent_settle(
    *,
    actor: Actor,
    stripe_event_id: str,
    invoice_id: uuid.UUID,
    attempt: int,
    amount_minor: object,
    currency: str,
    outcome: ChargeOutcome,
) -> str:
    """Settle the attempt a PaymentIntent's metadata names only if it is that attempt's: the
    PaymentIntent recorded for it, of its amount and currency. Metadata is whatever its
    creator wrote, so anything else is recorded on the invoice, alerts, and pays nothing.
    News about a paid (since perhaps refunded or disputed) or void invoice is ignored as
    ``payment_settle`` ignores it; a pending attempt with no PaymentIntent recorded yet (its
    answer was lost) is left to ``collect_due``, which resumes it with its key and records
    Stripe's answer."""
    invoice = row_lock(Invoice.objects.all()).filter(pk=invoice_id).first()
    payment = invoice.payments.filter(attempt=attempt).first() if invoice else None
    if invoice is None or payment is None or invoice.status in PAYMENT_CLOSED_STATUSES:
        return payment_settle(actor=actor, invoice_id=invoice_id, attempt=attempt, outcome=outcome)
    if not payment.payment_intent_id and payment.status == "pending":
        return (
            f"ignored: attempt {attempt} has no recorded PaymentIntent yet (collection resumes it)"
        )
    expected = (payment.payment_intent_id, payment.amount_minor, invoice.currency.lower())
    if (outcome.payment_intent_id, amount_minor, currency) == expected:
        return payment_settle(actor=actor, invoice_id=invoice_id, attempt=attempt, outcome=outcome)
    mismatch = ev.InvoicePaymentMismatched(
        attempt=attempt,
        payment_intent_id=outcome.payment_intent_id,
        amount_minor=amount_minor if isinstance(amount_minor, int) else -1,
        currency=currency,
        expected_payment_intent_id=expected[0],
        expected_amount_minor=expected[1],
        expected_currency=expected[2],
        stripe_event_id=stripe_event_id,
    )
    invoice_stream.append(actor, invoice, [mismatch])
    transaction.on_commit(lambda: _alert_mismatch(invoice.number, mismatch))
    return (
        f"refused: payment intent mismatch ({outcome.payment_intent_id}, {amount_minor} {currency}"
        f" is not attempt {attempt}'s {expected[0]}, {expected[1]} {expected[2]})"
    )


def _alert_mismatch(number: str, mismatch: ev.InvoicePaymentMismatched) -> None:
    """The operators' alert: one ERROR line of key=value pairs, for log-based alerting."""
    logger.error(
        "payment_mismatch invoice=%s attempt=%d payment_intent=%s amount_minor=%d currency=%s"
        " expected_payment_intent=%s expected_amount_minor=%d expected_currency=%s"
        " stripe_event=%s",
        number,
        mismatch.attempt,
        mismatch.payment_intent_id,
        mismatch.amount_minor,
        mismatch.currency,
        mismatch.expected_payment_intent_id,
        mismatch.expected_amount_minor,
        mismatch.expected_currency,
        mismatch.stripe_event_id,
    )


def _uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _id(value: object) -> str:
    """An expandable field's id: Stripe sends the id, or the object when it was expanded."""
    if isinstance(value, dict):
        return str(value.get("id") or "")
    return str(value or "")
