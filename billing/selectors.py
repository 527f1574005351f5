"""What billing reads: its own tables (invoices, accounts, what is due for collection, the
payment check of new work), and the inputs of rating from the other apps (catalog prices,
metering usage, reservations, the log for SLA timelines)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from uuid import UUID

from django.conf import settings
from django.db.models import Case, Q, QuerySet, When

from billing import events as ev
from billing.models import (
    OPEN_STATUSES,
    BillingAccount,
    CreditGrant,
    DefaultGpuPrice,
    DisputeStatus,
    Invoice,
    InvoicePayment,
    InvoiceStatus,
    SlaDefinition,
    TaxRate,
)
from billing.money import Money
from billing.rating import (
    Credit,
    GbHourPrice,
    Price,
    PriceBook,
    ReservationWindow,
    Unpriced,
    rate_reservations,
    rate_usage,
    usage_key,
)
from billing.sla import SCHEDULER_TYPES, Promise
from catalog.models import PricePlan, StoragePrice
from events import projections, store
from events.consumers import ProjectionConsumer, consumer_catch_up
from inventory.models import Cluster
from metering.intervals import month_of
from metering.selectors import UsageLine, usage_lines
from metering.selectors import storage_usage_for as metering_storage_usage_for
from metering.storage import StorageUsage
from neocloud.core.errors import NotFound
from scheduler.selectors import reservations_for_billing, workloads_on_reservations
from tenants.access import Action, Actor
from tenants.models import Organization

USAGE_PROJECTION = "metering.usage"


def invoice_list(*, actor: Actor) -> QuerySet[Invoice]:
    return actor.scope(Invoice.objects.all(), Action.INVOICE_READ)


def invoice_page(invoice: Invoice) -> dict[str, object]:
    """What the printable invoice shows: its organization, lines and totals formatted in the
    invoice's currency."""

    def money(minor: int) -> str:
        return Money(invoice.currency, minor).format()

    return {
        "invoice": invoice,
        "organization": Organization.objects.get(pk=invoice.organization_id),
        "lines": [(line, money(line.amount_minor)) for line in invoice.lines.all()],
        "subtotal": money(invoice.subtotal_minor),
        "credits": money(-invoice.credits_minor),
        "tax": money(invoice.tax_minor),
        "total": money(invoice.total_minor),
        "due": money(invoice.amount_due_minor),
        "credit_notes": [(note, money(-note.amount_minor)) for note in invoice.credit_notes.all()],
        "refunded": money(invoice.refunded_minor),
        "disputed": money(invoice.disputed_minor),
    }


def invoice_as_drafted(invoice: Invoice) -> ev.InvoiceDrafted:
    """The invoice as its last ``InvoiceDrafted`` said, to tell whether a redraft changes it."""
    for event in reversed(store.read_stream(ev.INVOICE_STREAM, str(invoice.pk))):
        if event.type == ev.InvoiceDrafted.event_type:
            return ev.InvoiceDrafted.model_validate(event.data)
    raise AssertionError(f"invoice {invoice.pk} has no draft")


def invoices_to_collect(*, now: datetime, pending_before: datetime) -> set[UUID]:
    """Dunning's work: finalized invoices whose next attempt is due, and open invoices with
    an attempt left pending since before ``pending_before`` (a crash, an unreachable
    Stripe)."""
    return set(
        Invoice.objects.filter(status=InvoiceStatus.FINALIZED, next_attempt_at__lte=now)
        .exclude(payments__status="pending")
        .values_list("pk", flat=True)
    ) | set(
        InvoicePayment.objects.filter(
            status="pending", attempted_at__lte=pending_before, invoice__status__in=OPEN_STATUSES
        ).values_list("invoice_id", flat=True)
    )


def payment_refusal(organization: Organization) -> str | None:
    """The payment check of new work: orders, workloads and reservations wait while an
    invoice is unpaid after dunning gave up (or was written off), while a payment is
    disputed, and after a dispute was lost until the invoice is paid again. Running work is
    never touched."""
    given_up = Q(
        status__in=OPEN_STATUSES, payment_failures__gte=settings.BILLING_DUNNING_MAX_FAILURES
    )
    disputed = Q(status=InvoiceStatus.DISPUTED) | Q(
        status__in=OPEN_STATUSES, dispute_status=DisputeStatus.LOST
    )
    overdue = (
        Invoice.objects.filter(organization=organization)
        .filter(given_up | disputed | Q(status=InvoiceStatus.UNCOLLECTIBLE))
        # One query: an open one dunning gave up on first (the oldest), then a disputed one,
        # else a written-off one.
        .order_by(Case(When(given_up, then=0), When(disputed, then=1), default=2), "period")
        .first()
    )
    if overdue is None:
        return None
    if overdue.status == InvoiceStatus.DISPUTED:
        return (
            f"invoice {overdue.number}'s payment is disputed; new work waits until the"
            " dispute is closed"
        )
    if (
        overdue.dispute_status == DisputeStatus.LOST
        and overdue.payment_failures < settings.BILLING_DUNNING_MAX_FAILURES
    ):
        return f"invoice {overdue.number} is unpaid: its payment's dispute was lost; pay it"
    return (
        f"invoice {overdue.number} is unpaid after {overdue.payment_failures} failed payment"
        " attempts; update the card and pay it"
    )


def organization_for_payment(*, actor: Actor, organization_id: str) -> Organization:
    """The organization whose card the caller sets, among those it may see: any other id,
    or one that is no UUID, is not found."""
    try:
        wanted = UUID(organization_id)
    except ValueError:
        raise NotFound("no such organization") from None
    organization = (
        actor.scope(Organization.objects.all(), Action.ORGANIZATION_READ).filter(pk=wanted).first()
    )
    if organization is None:
        raise NotFound("no such organization")
    return organization


def account_terms(organization_id: UUID) -> tuple[str, str, int]:
    """Billing country, currency and monthly commitment (the defaults without a profile)."""
    account = BillingAccount.objects.filter(organization_id=organization_id).first()
    if account is None:
        return settings.BILLING_DEFAULT_COUNTRY, settings.BILLING_DEFAULT_CURRENCY, 0
    return account.billing_country, account.currency, account.minimum_commitment_minor


def tax_rate_percent(country: str) -> Decimal:
    rate = TaxRate.objects.filter(country=country).values_list("rate_percent", flat=True).first()
    return rate if rate is not None else Decimal("0.000")


def price_book() -> PriceBook:
    """Every catalog price and default GPU price, read once per run."""
    book = PriceBook()
    for offering, region, plan, minor, currency in PricePlan.objects.values_list(
        "offering_id", "region", "plan", "price_per_gpu_hour_minor", "currency"
    ):
        book.catalog[(offering, region, plan)] = Price(minor, currency)
    for model, plan, minor, currency in DefaultGpuPrice.objects.values_list(
        "gpu_model", "price_plan", "price_per_gpu_hour_minor", "currency"
    ):
        book.defaults[(model, plan)] = Price(minor, currency)
    return book


def gpu_hour_price(
    offering: str | None, region: str | None, plan: str, gpu_model: str
) -> tuple[int, str] | None:
    """What a GPU-hour of such work is rated at (``PriceBook.price``'s rules, on the few rows
    that can apply), as (minor units, currency); None when it has no price."""
    book = PriceBook()
    if offering and region:
        for minor, currency in PricePlan.objects.filter(
            offering_id=offering, region=region, plan=plan
        ).values_list("price_per_gpu_hour_minor", "currency"):
            book.catalog[(offering, region, plan)] = Price(minor, currency)
    for wanted, minor, currency in DefaultGpuPrice.objects.filter(
        gpu_model=gpu_model, price_plan__in={plan, "on_demand"}
    ).values_list("price_plan", "price_per_gpu_hour_minor", "currency"):
        book.defaults[(gpu_model, wanted)] = Price(minor, currency)
    try:
        price = book.price(offering=offering, region=region, plan=plan, gpu_model=gpu_model)
    except Unpriced:
        return None
    return price.minor_per_gpu_hour, price.currency


def usage_caught_up() -> None:
    """Metering's usage is an asynchronous projection: bring it to the log's head before
    rating, so a period is never closed on a stale view (safe beside its running consumer:
    both take the checkpoint's row lock)."""
    for projection in projections.asynchronous():
        if projection.name == USAGE_PROJECTION:
            consumer_catch_up(ProjectionConsumer(projection))


def usage_for(organization_id: UUID, start: datetime, end: datetime) -> list[UsageLine]:
    return usage_lines(organization_id, start, end)


def storage_usage_for(organization_id: UUID, start: datetime, end: datetime) -> list[StorageUsage]:
    return metering_storage_usage_for(organization_id, start, end)


def storage_prices() -> dict[str, GbHourPrice]:
    return {
        volume_type: GbHourPrice(minor, currency)
        for volume_type, minor, currency in StoragePrice.objects.values_list(
            "volume_type", "price_per_gb_hour_minor", "currency"
        )
    }


def regions_of_clusters() -> dict[UUID, str]:
    return dict(Cluster.objects.values_list("pk", "region_id"))


def reservation_windows(
    organization_id: UUID, start: datetime, end: datetime, regions: dict[UUID, str]
) -> list[ReservationWindow]:
    """Reservations overlapping [start, end). A reservation is a commitment: billed for its
    whole window unless it was cancelled before the window began."""
    return [
        ReservationWindow(
            reservation_id=reservation.pk,
            project_id=reservation.project_id,
            offering=reservation.offering or None,
            region=regions.get(reservation.cluster_id),
            gpu_model=reservation.gpu_model,
            gpus=reservation.gpus,
            starts_at=reservation.starts_at,
            ends_at=reservation.ends_at,
        )
        for reservation in reservations_for_billing(organization_id, start, end)
    ]


def usage_covered(
    organization_id: UUID, start: datetime, end: datetime, windows: list[ReservationWindow]
) -> dict[str, int]:
    """By ``usage_key``: the milli-GPU-seconds of ``reserved`` usage in ``[start, end)`` that a
    billed reservation's window covers, for ``rating.rate_usage``: the usage of the work on
    each reservation inside its window, at most its GPUs all the window long (the engine
    keeps work on it within its GPUs at every instant; this bounds the sum whatever ran)."""
    covered: dict[str, int] = {}
    on = workloads_on_reservations([w.reservation_id for w in windows])
    for window in windows:
        begin, finish = max(window.starts_at, start), min(window.ends_at, end)
        if finish <= begin or not on[window.reservation_id]:
            continue
        left = window.gpus * 1000 * int((finish - begin).total_seconds())
        for line in usage_lines(organization_id, begin, finish, on[window.reservation_id]):
            if line.price_plan != "reserved":
                continue
            milli = min(line.milli_gpu_seconds, left)
            left -= milli
            key = usage_key(line)
            covered[key] = covered.get(key, 0) + milli
    return covered


def charges_month_to_date(organization_id: UUID, now: datetime) -> dict[str, int] | None:
    """What the organization's usage and reservations of the UTC month of ``now`` cost up to
    ``now``, per currency: rated as closing the month rates them, before its commitment,
    credits and tax. As fresh as metering's usage projection (not caught up here: a page
    reads it). None while some of it has no price (closing would wait for an operator)."""
    start, _ = month_of(now)
    prices = price_book()
    windows = reservation_windows(organization_id, start, now, regions_of_clusters())
    try:
        charges = rate_usage(
            usage_for(organization_id, start, now),
            prices,
            usage_covered(organization_id, start, now, windows),
        ) + rate_reservations(windows, prices, start, now)
    except Unpriced:
        return None
    spent: dict[str, int] = {}
    for line in charges:
        spent[line.currency] = spent.get(line.currency, 0) + line.amount_minor
    return dict(sorted(spent.items()))


def credits_available(organization_id: UUID) -> list[Credit]:
    """Credits with something left, oldest grant first: the order they are used in."""
    return [
        Credit(c.id, c.kind, c.remaining_minor, c.currency)
        for c in CreditGrant.objects.filter(
            organization_id=organization_id, remaining_minor__gt=0
        ).order_by("position")
    ]


def sla_promises() -> dict[str, Promise]:
    return {
        d.offering: Promise(
            availability_percent=d.availability_percent,
            availability_credit_percent=d.availability_credit_percent,
            max_provisioning_s=d.max_provisioning_s,
        )
        for d in SlaDefinition.objects.all()
    }


def scheduler_events_until(end: datetime) -> Iterator[tuple[str, str, datetime, dict[str, object]]]:
    """The scheduler's workload and allocation events recorded before ``end``, in log order."""
    for batch in store.iter_batches(types=SCHEDULER_TYPES):
        for event in batch:
            if event.recorded_at >= end:
                return
            yield event.type, event.stream_id, event.recorded_at, event.data
