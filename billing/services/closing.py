"""Closing a month: every organization's usage, reservations, commitment, SLA credits and
credits rated into one invoice per currency, drafted and (by default) finalized.

Concurrency: every operation runs concurrently with itself. Drafting and finalizing an
organization's invoices lock its ``Organization`` row first (credits are used once), then
append (the log's lock). Each organization is closed in its own transaction; an invoice
already finalized is left as it is, so closing twice (or two closings at once) changes
nothing the second time.
"""

from __future__ import annotations

import calendar
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from billing import events as ev
from billing import rating, selectors, sla
from billing.errors import PeriodInvalid
from billing.models import Invoice, InvoiceStatus
from events import store
from events.store import NO_STREAM
from events.types import DomainEvent
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants.access import Action, Actor
from tenants.models import Organization

INVOICE_NAMESPACE = uuid.UUID("5e0c0d7a-1b7e-4b6f-8d0a-62696c6c696e")
PERIOD = re.compile(r"^(\d{4})-(\d{2})$")


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


def invoice_id_for(organization_id: uuid.UUID, period: str, currency: str) -> uuid.UUID:
    return uuid.uuid5(INVOICE_NAMESPACE, f"{organization_id}/{period}/{currency}")


@dataclass
class Inputs:
    """What a run reads once for every organization; the SLA credits are for breaches that
    ended the month before (finalized invoices never change)."""

    prices: rating.PriceBook
    regions: dict[uuid.UUID, str]
    sla_credits: dict[uuid.UUID, list[rating.SlaCredit]] = field(default_factory=dict)
    storage_prices: dict[str, rating.GbHourPrice] = field(default_factory=dict)

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
        return cls(
            prices=prices,
            regions=regions,
            sla_credits=found,
            storage_prices=selectors.storage_prices(),
        )


def drafts_for(organization: Organization, period: Period, inputs: Inputs) -> list[rating.Draft]:
    """The organization's invoices for ``period``, one per currency it is charged in (its
    account's currency always, if it has a commitment)."""
    country, account_currency, commitment = selectors.account_terms(organization.pk)
    windows = selectors.reservation_windows(
        organization.pk, period.start, period.end, inputs.regions
    )
    charges = rating.rate_usage(
        selectors.usage_for(organization.pk, period.start, period.end),
        inputs.prices,
        selectors.usage_covered(organization.pk, period.start, period.end, windows),
    ) + rating.rate_reservations(windows, inputs.prices, period.start, period.end)
    charges += rating.rate_storage(  # volumes' provisioned GB-hours (issue 32)
        selectors.storage_usage_for(organization.pk, period.start, period.end),
        inputs.storage_prices,
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
        if current is None or selectors.invoice_as_drafted(current) != drafted:
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
