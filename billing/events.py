"""Billing events.

Streams:
- ``invoice/<id>``: one invoice's life. ``InvoiceDrafted`` carries every line and total, so
  replaying the log gives the same invoice to the minor unit whatever the prices or usage
  tables say later; after ``InvoiceFinalized`` only payment outcomes follow (paid,
  uncollectible, void, refunded, disputed): the lines never change.
- ``credit_note/<id>``: a correction of a finalized invoice.
- ``billing_account/<organization id>``: the organization's billing profile, its Stripe
  customer and payment method, and the credits granted to it.
- ``stripe_event/<Stripe event id>``: one event per webhook delivery processed. Appended with
  ``NO_STREAM``, so a second delivery of the same event conflicts and changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from events.types import DomainEvent, event_type

INVOICE_STREAM = "invoice"
CREDIT_NOTE_STREAM = "credit_note"
ACCOUNT_STREAM = "billing_account"
STRIPE_EVENT_STREAM = "stripe_event"


class LineData(BaseModel):
    """One invoice line. ``amount_minor`` is signed: charges positive, credits negative.

    ``source`` names what the line comes from: the usage line's key (project, offering, GPU
    model, plan, region), a reservation id, an SLA breach, a credit id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    description: str
    amount_minor: int
    source: str
    project_id: UUID | None = None
    offering: str | None = None
    gpu_model: str | None = None
    price_plan: str | None = None
    region: str | None = None
    milli_gpu_seconds: int | None = None
    unit_price_minor: int | None = None  # per GPU-hour
    allocation_ids: list[UUID] = []


@event_type("billing.InvoiceDrafted")
class InvoiceDrafted(DomainEvent):
    invoice_id: UUID
    organization_id: UUID
    number: str
    period: str  # YYYY-MM
    period_start: datetime
    period_end: datetime
    currency: str
    billing_country: str
    tax_rate_percent: str  # decimal string, e.g. "19.00"
    lines: list[LineData]
    subtotal_minor: int  # charges
    credits_minor: int  # SLA, promotional and prepaid credits, as a positive amount
    tax_minor: int
    total_minor: int  # subtotal - credits + tax: the amount due


@event_type("billing.InvoiceFinalized")
class InvoiceFinalized(DomainEvent):
    finalized_at: datetime


@event_type("billing.InvoicePaymentAttempted")
class InvoicePaymentAttempted(DomainEvent):
    attempt: int
    amount_minor: int
    payment_method_id: str


@event_type("billing.InvoicePaid")
class InvoicePaid(DomainEvent):
    attempt: int  # 0: nothing was due (credits covered it)
    payment_intent_id: str
    amount_minor: int


@event_type("billing.InvoicePaymentFailed")
class InvoicePaymentFailed(DomainEvent):
    attempt: int
    payment_intent_id: str
    code: str
    message: str
    next_attempt_at: datetime | None  # None: dunning stopped retrying


@event_type("billing.InvoicePaymentProcessing")
class InvoicePaymentProcessing(DomainEvent):
    """Stripe took the charge but has not finished it: the PaymentIntent a webhook must name."""

    attempt: int
    payment_intent_id: str


@event_type("billing.InvoicePaymentMismatched")
class InvoicePaymentMismatched(DomainEvent):
    """A webhook's PaymentIntent named this attempt but is not the one recorded for it, or
    not of its amount: nothing was paid, an operator looks (the alert is logged)."""

    attempt: int
    payment_intent_id: str
    amount_minor: int
    currency: str
    expected_payment_intent_id: str
    expected_amount_minor: int
    expected_currency: str
    stripe_event_id: str


@event_type("billing.InvoiceMarkedUncollectible")
class InvoiceMarkedUncollectible(DomainEvent):
    reason: str


@event_type("billing.InvoiceVoided")
class InvoiceVoided(DomainEvent):
    reason: str


@event_type("billing.InvoiceRefunded")
class InvoiceRefunded(DomainEvent):
    """Stripe refunded part or all of a payment (``charge.refunded``); a credit note of the
    amount is issued with it, so what was charged, credited and kept still add up."""

    attempt: int
    payment_intent_id: str
    amount_minor: int  # this refund
    payment_refunded_minor: int  # the payment's refunds so far, this one included
    full: bool  # nothing kept: the invoice is refunded
    stripe_event_id: str


@event_type("billing.InvoiceDisputed")
class InvoiceDisputed(DomainEvent):
    """The customer's bank disputes a payment (``charge.dispute.created``): the money is held
    until the dispute closes, and the organization's new work waits."""

    dispute_id: str
    payment_intent_id: str
    amount_minor: int
    reason: str
    stripe_event_id: str


@event_type("billing.InvoiceDisputeClosed")
class InvoiceDisputeClosed(DomainEvent):
    """Won: the invoice is paid again. Lost: the disputed amount is owed again and dunning
    resumes at ``next_attempt_at``."""

    dispute_id: str
    won: bool
    amount_minor: int
    next_attempt_at: datetime | None
    stripe_event_id: str


@event_type("billing.CreditNoteIssued")
class CreditNoteIssued(DomainEvent):
    credit_note_id: UUID
    invoice_id: UUID
    organization_id: UUID
    number: str
    amount_minor: int
    currency: str
    reason: str


@event_type("billing.BillingProfileSet")
class BillingProfileSet(DomainEvent):
    organization_id: UUID
    billing_country: str  # ISO 3166-1 alpha-2
    currency: str
    minimum_commitment_minor: int  # per month, in ``currency``


@event_type("billing.StripeCustomerCreated")
class StripeCustomerCreated(DomainEvent):
    customer_id: str


@event_type("billing.PaymentMethodSet")
class PaymentMethodSet(DomainEvent):
    payment_method_id: str
    brand: str
    last4: str


@event_type("billing.CreditGranted")
class CreditGranted(DomainEvent):
    credit_id: UUID
    kind: str  # promotional | prepaid
    amount_minor: int
    currency: str
    reason: str


@event_type("billing.StripeEventProcessed")
class StripeEventProcessed(DomainEvent):
    stripe_event_id: str
    type: str
    object_id: str
    outcome: str  # what it changed, or why it changed nothing
