"""Billing writes: profiles and credits, closing a month into invoices, collecting them
through Stripe, webhooks, dunning, corrections.

Concurrency: every operation runs concurrently with itself. Drafting and finalizing an
organization's invoices lock its ``Organization`` row first (credits are used once), then
append (the log's lock). An invoice's payment steps lock its ``Invoice`` row, then append (a
credit note on a paid invoice also locks the account's row first: it grants prepaid credit).
Stripe is never called inside a transaction: ``invoice_collect`` commits the attempt, calls
Stripe, and records the outcome in a second transaction, so a crash in between leaves a
pending attempt that is resumed with the same idempotency key (the same PaymentIntent).
"""

from __future__ import annotations

import calendar
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import stripe
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing import events as ev
from billing import rating, selectors, sla
from billing.errors import (
    BillingInvalid,
    InvalidInvoiceTransition,
    PeriodInvalid,
    WebhookConflict,
    WebhookSignatureInvalid,
)
from billing.models import (
    PLANS,
    BillingAccount,
    DefaultGpuPrice,
    Invoice,
    InvoicePayment,
    InvoiceStatus,
)
from billing.money import CURRENCY
from billing.stripe_gateway import ChargeOutcome, PaymentGateway, gateway, webhook_event
from events import store
from events.errors import StreamConflict
from events.store import NO_STREAM, Metadata
from events.types import DomainEvent
from inventory.models import GpuModel
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants.access import Action, Actor
from tenants.models import Organization

logger = logging.getLogger(__name__)

INVOICE_NAMESPACE = uuid.UUID("5e0c0d7a-1b7e-4b6f-8d0a-62696c6c696e")
SYSTEM = Actor.system_actor("billing")
PERIOD = re.compile(r"^(\d{4})-(\d{2})$")
COUNTRY = re.compile(r"^[A-Z]{2}$")
OPEN = (InvoiceStatus.FINALIZED, InvoiceStatus.UNCOLLECTIBLE)


# --- periods -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """A calendar month in UTC: [start, end)."""

    name: str
    start: datetime
    end: datetime

    @classmethod
    def parse(cls, name: str) -> Period:
        match = PERIOD.match(name)
        if not match or not 1 <= int(match[2]) <= 12:
            raise PeriodInvalid(
                f"a period is YYYY-MM, not {name!r}", fields={"period": ["YYYY-MM"]}
            )
        return cls.of(datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC))

    @classmethod
    def of(cls, moment: datetime) -> Period:
        start = moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        days = calendar.monthrange(start.year, start.month)[1]
        return cls(f"{start:%Y-%m}", start, start + timedelta(days=days))

    @property
    def previous(self) -> Period:
        return Period.of(self.start - timedelta(days=1))


# --- billing accounts and credits ------------------------------------------------------------


def _account_append(
    actor: Actor, organization: Organization, events: Sequence[DomainEvent]
) -> None:
    account = row_lock(BillingAccount.objects.all()).filter(organization=organization).first()
    if account is None:
        country, currency, _ = selectors.account_terms(organization.pk)
        # The defaults become events, so a replay never depends on today's settings.
        events = [
            ev.BillingProfileSet(
                organization_id=organization.pk,
                billing_country=country,
                currency=currency,
                minimum_commitment_minor=0,
            ),
            *events,
        ]
    store.append(
        ev.ACCOUNT_STREAM,
        str(organization.pk),
        events,
        expected_version=account.version if account else NO_STREAM,
        metadata=actor.metadata(organization.pk),
    )


def account_profile_set(
    *,
    actor: Actor,
    organization: Organization,
    billing_country: str,
    currency: str,
    minimum_commitment_minor: int = 0,
) -> BillingAccount:
    """Operators set where an organization is billed (its tax), in which currency, and its
    minimum monthly commitment."""
    actor.require(Action.BILLING_OPERATE)
    problems: dict[str, list[str]] = {}
    if not COUNTRY.match(billing_country):
        problems["billing_country"] = ["an ISO 3166-1 alpha-2 code such as DE"]
    if not CURRENCY.match(currency):
        problems["currency"] = ["an ISO 4217 code such as USD"]
    if minimum_commitment_minor < 0:
        problems["minimum_commitment_minor"] = ["not negative"]
    if problems:
        raise BillingInvalid("billing profile is not valid", fields=problems)
    _account_append(
        actor,
        organization,
        [
            ev.BillingProfileSet(
                organization_id=organization.pk,
                billing_country=billing_country,
                currency=currency,
                minimum_commitment_minor=minimum_commitment_minor,
            )
        ],
    )
    return BillingAccount.objects.get(organization=organization)


def credit_grant(
    *,
    actor: Actor,
    organization: Organization,
    kind: str,
    amount_minor: int,
    currency: str,
    reason: str = "",
) -> uuid.UUID:
    """Operators grant promotional credit (a discount) or record prepaid credit (money paid
    in advance); invoices use them oldest first (``rating``)."""
    actor.require(Action.BILLING_OPERATE)
    if kind not in {"promotional", "prepaid"}:
        raise BillingInvalid("kind is promotional or prepaid", fields={"kind": ["unknown"]})
    if amount_minor <= 0:
        raise BillingInvalid("a credit is positive", fields={"amount_minor": ["positive"]})
    if not CURRENCY.match(currency):
        raise BillingInvalid("an ISO 4217 currency", fields={"currency": ["invalid"]})
    credit_id = uuid.uuid4()
    _account_append(
        actor,
        organization,
        [
            ev.CreditGranted(
                credit_id=credit_id,
                kind=kind,
                amount_minor=amount_minor,
                currency=currency,
                reason=reason,
            )
        ],
    )
    return credit_id


def payment_method_set(
    *,
    actor: Actor,
    organization: Organization,
    payment_method_id: str,
    pay: PaymentGateway | None = None,
) -> BillingAccount:
    """Attach a card (a Stripe PaymentMethod made by Stripe.js) to the organization's Stripe
    customer, created on first use, and make it the one invoices are charged to.

    Calls Stripe, so it runs outside a transaction; each record is its own short one."""
    actor.require(Action.INVOICE_PAY, organization)
    pay = pay or gateway()
    account = BillingAccount.objects.filter(organization=organization).first()
    customer_id = account.stripe_customer_id if account else ""
    if not customer_id:
        customer_id = pay.customer_create(
            organization_id=organization.pk,
            email=organization.billing_email,
            name=organization.name,
        )
        atomic_with_retry(
            _account_record,
            actor=actor,
            organization=organization,
            event=ev.StripeCustomerCreated(customer_id=customer_id),
        )
    card = pay.payment_method_attach(customer_id=customer_id, payment_method_id=payment_method_id)
    atomic_with_retry(
        _account_record,
        actor=actor,
        organization=organization,
        event=ev.PaymentMethodSet(
            payment_method_id=card.payment_method_id, brand=card.brand, last4=card.last4
        ),
    )
    return BillingAccount.objects.get(organization=organization)


def _account_record(*, actor: Actor, organization: Organization, event: DomainEvent) -> None:
    if isinstance(event, ev.StripeCustomerCreated):
        account = BillingAccount.objects.filter(organization=organization).first()
        if account is not None and account.stripe_customer_id:
            return  # a concurrent call created it first (same idempotency key: same customer)
    _account_append(actor, organization, [event])


# --- default prices ---------------------------------------------------------------------------


def default_price_set(
    *,
    actor: Actor,
    gpu_model: str,
    price_per_gpu_hour_minor: int,
    currency: str,
    price_plan: str = "on_demand",
) -> DefaultGpuPrice:
    """Set (create or replace) the price of usage from no offering on ``gpu_model`` under
    ``price_plan``: without one, a month with such usage cannot be invoiced. Operators'
    configuration, like the admin's form: a table, not an event (rating copies the price it
    used into ``InvoiceDrafted``)."""
    actor.require(Action.BILLING_OPERATE)
    problems: dict[str, list[str]] = {}
    if not GpuModel.objects.filter(slug=gpu_model).exists():
        problems["gpu_model"] = [f"unknown GPU model {gpu_model!r}"]
    if price_plan not in dict(PLANS):
        problems["price_plan"] = [f"one of {', '.join(dict(PLANS))}"]
    if not CURRENCY.match(currency):
        problems["currency"] = ["an ISO 4217 code such as USD"]
    if price_per_gpu_hour_minor < 0:
        problems["price_per_gpu_hour_minor"] = ["not negative"]
    if problems:
        raise BillingInvalid("default price is not valid", fields=problems)
    price, _ = DefaultGpuPrice.objects.update_or_create(
        gpu_model=gpu_model,
        price_plan=price_plan,
        defaults={"price_per_gpu_hour_minor": price_per_gpu_hour_minor, "currency": currency},
    )
    return price


# --- closing a month -------------------------------------------------------------------------


def invoice_id_for(organization_id: uuid.UUID, period: str, currency: str) -> uuid.UUID:
    return uuid.uuid5(INVOICE_NAMESPACE, f"{organization_id}/{period}/{currency}")


@dataclass
class Inputs:
    """What a run reads once for every organization."""

    prices: rating.PriceBook
    regions: dict[uuid.UUID, str]
    sla_credits: dict[uuid.UUID, list[rating.SlaCredit]] = field(default_factory=dict)

    @classmethod
    def read(cls, period: Period) -> Inputs:
        selectors.usage_caught_up()
        prices = selectors.price_book()
        regions = selectors.regions_of_clusters()
        breach_month = period.previous
        found = sla.breaches(
            sla.timelines(selectors.scheduler_events_until(breach_month.end)),
            selectors.sla_promises(),
            region_of_cluster=regions,
            prices=prices,
            start=breach_month.start,
            end=breach_month.end,
        )
        return cls(prices=prices, regions=regions, sla_credits=found)


def drafts_for(organization: Organization, period: Period, inputs: Inputs) -> list[rating.Draft]:
    """The organization's invoices for ``period``, one per currency it is charged in (its
    account's currency always, if it has a commitment)."""
    country, account_currency, commitment = selectors.account_terms(organization.pk)
    charges = rating.rate_usage(
        selectors.usage_for(organization.pk, period.start, period.end), inputs.prices
    ) + rating.rate_reservations(
        selectors.reservation_windows(organization.pk, period.start, period.end, inputs.regions),
        inputs.prices,
        period.start,
        period.end,
    )
    currencies = {line.currency for line in charges}
    if commitment:
        currencies.add(account_currency)
    tax = selectors.tax_rate_percent(country)
    credits = selectors.credits_available(organization.pk)
    breaches = inputs.sla_credits.get(organization.pk, [])
    return [
        rating.compose(
            currency=currency,
            charges=charges,
            commitment_minor=commitment if currency == account_currency else 0,
            sla_credits=breaches,
            credits=credits,
            tax_rate_percent=tax,
            billing_country=country,
        )
        for currency in sorted(currencies)
    ]


def _drafted_event(
    organization: Organization, period: Period, draft: rating.Draft
) -> ev.InvoiceDrafted:
    country, account_currency, _ = selectors.account_terms(organization.pk)
    suffix = "" if draft.currency == account_currency else f"-{draft.currency}"
    return ev.InvoiceDrafted(
        invoice_id=invoice_id_for(organization.pk, period.name, draft.currency),
        organization_id=organization.pk,
        number=f"INV-{period.name}-{organization.slug}{suffix}",
        period=period.name,
        period_start=period.start,
        period_end=period.end,
        currency=draft.currency,
        billing_country=country,
        tax_rate_percent=str(selectors.tax_rate_percent(country)),
        lines=[
            ev.LineData(
                kind=line.kind,
                description=line.description,
                amount_minor=line.amount_minor,
                source=line.source,
                project_id=line.project_id,
                offering=line.offering,
                gpu_model=line.gpu_model,
                price_plan=line.price_plan,
                region=line.region,
                milli_gpu_seconds=line.milli_gpu_seconds,
                unit_price_minor=line.unit_price_minor,
                allocation_ids=list(line.allocation_ids),
            )
            for line in draft.lines
        ],
        subtotal_minor=draft.subtotal_minor,
        credits_minor=draft.credits_minor,
        tax_minor=draft.tax_minor,
        total_minor=draft.total_minor,
    )


def invoices_draft(
    *, actor: Actor, organization: Organization, period: Period, inputs: Inputs, finalize: bool
) -> list[Invoice]:
    """Draft (or redraft) the organization's invoices for ``period``; with ``finalize``, issue
    them. An invoice already finalized is left as it is, so closing twice changes nothing.

    Locks the organization's row: its credits are used by one invoice at a time."""
    actor.require(Action.BILLING_OPERATE)
    row_lock(Organization.objects.all()).get(pk=organization.pk)
    done = []
    for draft in drafts_for(organization, period, inputs):
        if not draft.lines:
            continue
        drafted = _drafted_event(organization, period, draft)
        current = Invoice.objects.filter(pk=drafted.invoice_id).first()
        if current is not None and current.status != InvoiceStatus.DRAFT:
            continue
        changes: list[DomainEvent] = []
        if current is None or _as_drafted(current) != drafted:
            changes.append(drafted)
        if finalize:
            now = timezone.now()
            changes.append(ev.InvoiceFinalized(finalized_at=now))
            if drafted.total_minor == 0:
                changes.append(ev.InvoicePaid(attempt=0, payment_intent_id="", amount_minor=0))
        if changes:
            store.append(
                ev.INVOICE_STREAM,
                str(drafted.invoice_id),
                changes,
                expected_version=current.version if current else NO_STREAM,
                metadata=actor.metadata(organization.pk),
            )
        done.append(Invoice.objects.get(pk=drafted.invoice_id))
    return done


def _as_drafted(invoice: Invoice) -> ev.InvoiceDrafted:
    """The invoice as its last ``InvoiceDrafted`` said, to tell whether a redraft changes it."""
    for event in reversed(store.read_stream(ev.INVOICE_STREAM, str(invoice.pk))):
        if event.type == ev.InvoiceDrafted.event_type:
            return ev.InvoiceDrafted.model_validate(event.data)
    raise AssertionError(f"invoice {invoice.pk} has no draft")


@dataclass
class CloseReport:
    period: str
    invoices: list[Invoice] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # organization slug: why


def period_close(*, actor: Actor, period: Period, finalize: bool = True) -> CloseReport:
    """Invoice every organization for ``period`` (each in its own transaction). An
    organization whose usage has no price is reported and left for an operator; the others
    are invoiced."""
    actor.require(Action.BILLING_OPERATE)
    inputs = Inputs.read(period)
    report = CloseReport(period.name)
    for organization in Organization.objects.order_by("slug"):
        try:
            report.invoices += atomic_with_retry(
                invoices_draft,
                actor=actor,
                organization=organization,
                period=period,
                inputs=inputs,
                finalize=finalize,
            )
        except rating.Unpriced as exc:
            report.refused[organization.slug] = str(exc)
    return report


# --- corrections -----------------------------------------------------------------------------


def _invoice_locked(invoice_id: uuid.UUID) -> Invoice:
    return row_lock(Invoice.objects.all()).get(pk=invoice_id)


def _invoice_append(actor: Actor, invoice: Invoice, events: Sequence[DomainEvent]) -> None:
    store.append(
        ev.INVOICE_STREAM,
        str(invoice.pk),
        events,
        expected_version=invoice.version,
        metadata=actor.metadata(invoice.organization_id),
    )


def invoice_void(*, actor: Actor, invoice: Invoice, reason: str) -> Invoice:
    """Cancel an invoice nothing was paid on (its credits come back)."""
    actor.require(Action.BILLING_OPERATE)
    invoice = _invoice_locked(invoice.pk)
    if invoice.status not in {InvoiceStatus.DRAFT, *OPEN} or invoice.paid_minor:
        raise InvalidInvoiceTransition(f"a {invoice.status} invoice cannot be voided")
    _invoice_append(actor, invoice, [ev.InvoiceVoided(reason=reason)])
    return Invoice.objects.get(pk=invoice.pk)


def invoice_mark_uncollectible(*, actor: Actor, invoice: Invoice, reason: str) -> Invoice:
    actor.require(Action.BILLING_OPERATE)
    invoice = _invoice_locked(invoice.pk)
    if invoice.status != InvoiceStatus.FINALIZED:
        raise InvalidInvoiceTransition(f"a {invoice.status} invoice cannot become uncollectible")
    _invoice_append(actor, invoice, [ev.InvoiceMarkedUncollectible(reason=reason)])
    return Invoice.objects.get(pk=invoice.pk)


def credit_note_issue(*, actor: Actor, invoice: Invoice, amount_minor: int, reason: str) -> Invoice:
    """Correct a finalized invoice without changing it: the note lowers what is due; on an
    invoice already paid, the amount becomes prepaid credit for the next invoices."""
    actor.require(Action.BILLING_OPERATE)
    invoice = _invoice_locked(invoice.pk)
    if invoice.status not in {*OPEN, InvoiceStatus.PAID}:
        raise InvalidInvoiceTransition(f"a {invoice.status} invoice takes no credit note")
    if invoice.status == InvoiceStatus.PAID:
        # The prepaid credit below writes the account: its row before the log's lock.
        row_lock(BillingAccount.objects.filter(organization_id=invoice.organization_id)).first()
    room = invoice.total_minor - invoice.credited_minor
    if not 0 < amount_minor <= room:
        raise BillingInvalid(
            f"a credit note is 1 to {room} minor units here", fields={"amount_minor": ["range"]}
        )
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
        invoice = _invoice_locked(invoice.pk)
        _invoice_append(
            actor, invoice, [ev.InvoicePaid(attempt=0, payment_intent_id="", amount_minor=0)]
        )
    return Invoice.objects.get(pk=invoice.pk)


# --- collection and dunning ------------------------------------------------------------------


def _idempotency_key(invoice_id: uuid.UUID, attempt: int) -> str:
    return f"invoice/{invoice_id}/attempt/{attempt}"


def _attempt_start(*, actor: Actor, invoice_id: uuid.UUID) -> InvoicePayment | None:
    """The attempt to make: a pending one (resumed with its key), or a new one. None when
    nothing is to collect."""
    invoice = _invoice_locked(invoice_id)
    if invoice.status not in OPEN or invoice.amount_due_minor == 0:
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
    _invoice_append(actor, invoice, events)
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
    settled, anything about a paid or void invoice. A success after a recorded failure of the
    same attempt still pays the invoice (the money came in). A ``processing`` answer records
    the PaymentIntent, which the webhook that ends it must name."""
    invoice = row_lock(Invoice.objects.all()).filter(pk=invoice_id).first()
    if invoice is None:
        return "ignored: unknown invoice"
    payment = invoice.payments.filter(attempt=attempt).first()
    if payment is None:
        return "ignored: unknown attempt"
    if invoice.status in {InvoiceStatus.PAID, InvoiceStatus.VOID}:
        return f"ignored: invoice is {invoice.status}"
    if outcome.status == "succeeded":
        _invoice_append(
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
        _invoice_append(
            actor,
            invoice,
            [_failure(invoice, attempt, outcome.payment_intent_id, outcome.code, outcome.message)],
        )
        return "failed"
    if outcome.status == "processing" and not payment.payment_intent_id:
        _invoice_append(
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
    stale = now - timedelta(seconds=settings.BILLING_PENDING_RETRY_S)
    due = set(
        Invoice.objects.filter(status=InvoiceStatus.FINALIZED, next_attempt_at__lte=now)
        .exclude(payments__status="pending")
        .values_list("pk", flat=True)
    ) | set(
        InvoicePayment.objects.filter(
            status="pending", attempted_at__lte=stale, invoice__status__in=OPEN
        ).values_list("invoice_id", flat=True)
    )
    for invoice in Invoice.objects.filter(pk__in=due).order_by("period", "number"):
        try:
            invoice_collect(actor=actor, invoice=invoice)
        except StreamConflict:
            logger.info("invoice %s moved while collecting; next tick", invoice.number)
    return len(due)


def payment_refusal(organization: Organization) -> str | None:
    """The payment check of new work: orders, workloads and reservations wait while an
    invoice is unpaid after dunning gave up (or was written off). Running work is never
    touched."""
    overdue = (
        Invoice.objects.filter(organization=organization, status__in=OPEN)
        .filter(payment_failures__gte=settings.BILLING_DUNNING_MAX_FAILURES)
        .order_by("period")
        .first()
    ) or Invoice.objects.filter(
        organization=organization, status=InvoiceStatus.UNCOLLECTIBLE
    ).first()
    if overdue is None:
        return None
    return (
        f"invoice {overdue.number} is unpaid after {overdue.payment_failures} failed payment"
        " attempts; update the card and pay it"
    )


# --- webhooks --------------------------------------------------------------------------------


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
    outcome = "ignored: not a payment of ours"
    metadata = obj.get("metadata") or {}
    invoice_id = _uuid(metadata.get("invoice_id"))
    if event_type in INTENT_OUTCOMES and invoice_id is not None:
        error = obj.get("last_payment_error") or {}
        outcome = _intent_settle(
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
    News about a paid or void invoice is ignored as ``payment_settle`` ignores it; a pending
    attempt with no PaymentIntent recorded yet (its answer was lost) is left to
    ``collect_due``, which resumes it with its key and records Stripe's answer."""
    invoice = row_lock(Invoice.objects.all()).filter(pk=invoice_id).first()
    payment = invoice.payments.filter(attempt=attempt).first() if invoice else None
    if (
        invoice is None
        or payment is None
        or invoice.status in {InvoiceStatus.PAID, InvoiceStatus.VOID}
    ):
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
    _invoice_append(actor, invoice, [mismatch])
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
