"""Corrections of issued invoices: voiding one, writing one off, credit notes.

Concurrency: each locks the ``Invoice`` row, then appends (``invoice_stream``). A credit note
on a paid invoice also grants prepaid credit, which writes the account: its
``BillingAccount`` row is locked before the log's lock is taken.
"""

from __future__ import annotations

import uuid

from billing import events as ev
from billing.errors import BillingInvalid, InvalidInvoiceTransition
from billing.models import OPEN_STATUSES, BillingAccount, Invoice, InvoiceStatus
from billing.services import invoice_stream
from billing.services.accounts import credit_grant
from events import store
from events.store import NO_STREAM
from neocloud.core.transactions import row_lock
from tenants.access import Action, Actor
from tenants.models import Organization


def invoice_void(*, actor: Actor, invoice: Invoice, reason: str) -> Invoice:
    """Cancel an invoice nothing was paid on (its credits come back)."""
    actor.require(Action.BILLING_OPERATE)
    invoice = invoice_stream.locked(invoice.pk)
    if invoice.status not in {InvoiceStatus.DRAFT, *OPEN_STATUSES} or invoice.paid_minor:
        raise InvalidInvoiceTransition(f"a {invoice.status} invoice cannot be voided")
    invoice_stream.append(actor, invoice, [ev.InvoiceVoided(reason=reason)])
    return Invoice.objects.get(pk=invoice.pk)


def invoice_mark_uncollectible(*, actor: Actor, invoice: Invoice, reason: str) -> Invoice:
    """Write off a finalized invoice: dunning stops, and new work stays refused until it is
    paid or voided (``selectors.payment_refusal``)."""
    actor.require(Action.BILLING_OPERATE)
    invoice = invoice_stream.locked(invoice.pk)
    if invoice.status != InvoiceStatus.FINALIZED:
        raise InvalidInvoiceTransition(f"a {invoice.status} invoice cannot become uncollectible")
    invoice_stream.append(actor, invoice, [ev.InvoiceMarkedUncollectible(reason=reason)])
    return Invoice.objects.get(pk=invoice.pk)


def credit_note_append(*, actor: Actor, invoice: Invoice, amount_minor: int, reason: str) -> None:
    """A credit note's own stream, numbered after the invoice's notes. The caller holds the
    ``Invoice`` row's lock (the count is the number's) and checked the amount."""
    note_id = uuid.uuid4()
    count = invoice.credit_notes.count() + 1
    store.append(
        ev.CREDIT_NOTE_STREAM,
        str(note_id),
        [
            ev.CreditNoteIssued(
                credit_note_id=note_id,
                invoice_id=invoice.pk,
                organization_id=invoice.organization_id,
                number=f"CN-{invoice.number}-{count}",
                amount_minor=amount_minor,
                currency=invoice.currency,
                reason=reason,
            )
        ],
        expected_version=NO_STREAM,
        metadata=actor.metadata(invoice.organization_id),
    )


def credit_note_issue(*, actor: Actor, invoice: Invoice, amount_minor: int, reason: str) -> Invoice:
    """Correct a finalized invoice without changing it: the note lowers what is due; on an
    invoice already paid, the amount becomes prepaid credit for the next invoices."""
    actor.require(Action.BILLING_OPERATE)
    invoice = invoice_stream.locked(invoice.pk)
    if invoice.status not in {*OPEN_STATUSES, InvoiceStatus.PAID}:
        raise InvalidInvoiceTransition(f"a {invoice.status} invoice takes no credit note")
    if invoice.status == InvoiceStatus.PAID:
        # The prepaid credit below writes the account: its row before the log's lock.
        row_lock(BillingAccount.objects.filter(organization_id=invoice.organization_id)).first()
    room = invoice.total_minor - invoice.credited_minor
    if not 0 < amount_minor <= room:
        raise BillingInvalid(
            f"a credit note is 1 to {room} minor units here", fields={"amount_minor": ["range"]}
        )
    credit_note_append(actor=actor, invoice=invoice, amount_minor=amount_minor, reason=reason)
    organization = Organization.objects.get(pk=invoice.organization_id)
    if invoice.status == InvoiceStatus.PAID:
        credit_grant(
            actor=actor,
            organization=organization,
            kind="prepaid",
            amount_minor=amount_minor,
            currency=invoice.currency,
            reason=f"credit note on {invoice.number}: {reason}",
        )
    elif invoice.amount_due_minor - amount_minor <= 0:
        invoice = invoice_stream.locked(invoice.pk)
        invoice_stream.append(
            actor, invoice, [ev.InvoicePaid(attempt=0, payment_intent_id="", amount_minor=0)]
        )
    return Invoice.objects.get(pk=invoice.pk)
