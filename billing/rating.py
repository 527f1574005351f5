"""Rating: usage, reservations, commitments, credits and tax into the lines of an invoice.

Pure functions over values (no database): closing a month (``services.closing``) reads
prices, usage and credits through the selectors and passes them in, so the same code rates a
live invoice, a replay check and the benchmark.

Order of an invoice, in one currency:

1. **charges** — each usage line at its price (milli-GPU-seconds x price per GPU-hour /
   3,600,000, rounded once, half up); usage under the ``reserved`` plan is shown at zero for
   the part a billed reservation's window covers (``covered``), as the reservation pays for
   it, and the rest (work that ran on past the window) at the on-demand price; each
   reservation for the part of its window inside the month, used or not;
2. **commitment top-up** — when the charges are below the organization's monthly minimum
   commitment, a line for the difference;
3. **SLA credits** — breaches of the previous month, each capped so that charges never go
   below zero;
4. **promotional credits**, oldest grant first — a discount, so it lowers the taxable amount;
5. **tax** — the billing country's rate on charges less SLA and promotional credits, rounded
   once, half up;
6. **prepaid credits**, oldest grant first — money paid in advance, so it pays the taxed
   amount and does not lower the tax.

So ``total = subtotal - credits + tax``, to the minor unit, and never below zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Protocol
from uuid import UUID

from billing.money import round_half_up
from metering.storage import StorageUsage

MILLI_GPU_SECONDS_PER_GPU_HOUR = 1000 * 3600


class Usage(Protocol):
    """What rating reads of a metering usage line (``metering.selectors.UsageLine``)."""

    @property
    def project_id(self) -> UUID: ...
    @property
    def offering(self) -> str | None: ...
    @property
    def gpu_model(self) -> str: ...
    @property
    def price_plan(self) -> str: ...
    @property
    def region(self) -> str | None: ...
    @property
    def milli_gpu_seconds(self) -> int: ...
    @property
    def allocation_ids(self) -> tuple[UUID, ...]: ...


class Unpriced(Exception):
    """Usage with no price: never billed as free, the invoice waits for an operator."""


@dataclass(frozen=True)
class Price:
    minor_per_gpu_hour: int
    currency: str


@dataclass
class PriceBook:
    """Catalog prices by (offering, region, plan), and default prices by (GPU model, plan)
    for usage that came from no offering."""

    catalog: dict[tuple[str, str, str], Price] = field(default_factory=dict)
    defaults: dict[tuple[str, str], Price] = field(default_factory=dict)

    def price(
        self, *, offering: str | None, region: str | None, plan: str, gpu_model: str
    ) -> Price:
        if offering and region and (offering, region, plan) in self.catalog:
            return self.catalog[(offering, region, plan)]
        if offering and region:
            raise Unpriced(f"offering {offering} has no {plan} price in {region}")
        for wanted in (plan, "on_demand"):
            if (gpu_model, wanted) in self.defaults:
                return self.defaults[(gpu_model, wanted)]
        raise Unpriced(f"no default {plan} price for GPU model {gpu_model}")

    def on_demand(self, *, offering: str | None, region: str | None, gpu_model: str) -> Price:
        """What reserved work pays beyond its reservation's window: its offering's on-demand
        price in the region, else the GPU model's default on-demand price."""
        if offering and region and (offering, region, "on_demand") in self.catalog:
            return self.catalog[(offering, region, "on_demand")]
        if (gpu_model, "on_demand") in self.defaults:
            return self.defaults[(gpu_model, "on_demand")]
        raise Unpriced(f"no on_demand price for GPU model {gpu_model} beyond a reservation")


@dataclass(frozen=True)
class Line:
    """A rated line; ``amount_minor`` is signed (credits negative)."""

    # usage, reservation, commitment, sla_credit, promotional_credit, prepaid_credit, tax
    kind: str
    description: str
    amount_minor: int
    currency: str
    source: str
    project_id: UUID | None = None
    offering: str | None = None
    gpu_model: str | None = None
    price_plan: str | None = None
    region: str | None = None
    milli_gpu_seconds: int | None = None
    unit_price_minor: int | None = None
    allocation_ids: tuple[UUID, ...] = ()


@dataclass(frozen=True)
class ReservationWindow:
    reservation_id: UUID
    project_id: UUID
    offering: str | None
    region: str | None
    gpu_model: str
    gpus: int
    starts_at: datetime
    ends_at: datetime


@dataclass(frozen=True)
class Credit:
    credit_id: UUID
    kind: str  # promotional | prepaid
    remaining_minor: int
    currency: str


@dataclass(frozen=True)
class SlaCredit:
    """A breach and what it is worth, in the currency of the workload's price."""

    source: str
    description: str
    amount_minor: int
    currency: str


@dataclass(frozen=True)
class Draft:
    currency: str
    lines: tuple[Line, ...]
    subtotal_minor: int
    credits_minor: int
    tax_minor: int
    total_minor: int


def usage_key(usage: Usage) -> str:
    """A usage line's name on the invoice: what it was aggregated by."""
    return "/".join(
        [
            "usage",
            str(usage.project_id),
            usage.offering or "-",
            usage.gpu_model,
            usage.price_plan,
            usage.region or "-",
        ]
    )


def gpu_hours(milli_gpu_seconds: int) -> str:
    """For people, to four decimals (the amount is computed from the exact figure)."""
    hours = Decimal(milli_gpu_seconds) / MILLI_GPU_SECONDS_PER_GPU_HOUR
    return f"{hours.quantize(Decimal('0.0001'), rounding=ROUND_HALF_UP)}"


def amount_for(milli_gpu_seconds: int, price: Price) -> int:
    """The one rounding of a usage line: exact rational amount, half up."""
    return round_half_up(
        Fraction(milli_gpu_seconds * price.minor_per_gpu_hour, MILLI_GPU_SECONDS_PER_GPU_HOUR)
    )


def rate_usage(
    usage: Iterable[Usage], prices: PriceBook, covered: Mapping[str, int] | None = None
) -> list[Line]:
    """A line per usage line at its price. ``covered``: by ``usage_key``, the milli-GPU-seconds
    of ``reserved`` usage inside a billed reservation's window (``selectors.usage_covered``):
    that part is at zero, the rest at the on-demand price (``PriceBook.on_demand``), on a line
    of its own. No reserved usage is free that no reservation paid for."""
    lines = []
    for item in sorted(usage, key=usage_key):
        price = prices.price(
            offering=item.offering,
            region=item.region,
            plan=item.price_plan,
            gpu_model=item.gpu_model,
        )
        reserved = item.price_plan == "reserved"
        milli = item.milli_gpu_seconds
        if reserved:
            milli = min(milli, (covered or {}).get(usage_key(item), 0))
        what = item.offering or f"{item.gpu_model} (no offering)"
        if milli or not reserved:
            lines.append(
                _usage_line(
                    item,
                    f"{what}, {item.price_plan}, {gpu_hours(milli)} GPU-hours"
                    + (" (covered by the reservation)" if reserved else ""),
                    0 if reserved else amount_for(milli, price),
                    price,
                    milli,
                    usage_key(item),
                )
            )
        beyond = item.milli_gpu_seconds - milli
        if reserved and beyond:
            on_demand = prices.on_demand(
                offering=item.offering, region=item.region, gpu_model=item.gpu_model
            )
            lines.append(
                _usage_line(
                    item,
                    f"{what}, reserved, {gpu_hours(beyond)} GPU-hours outside the reservation's"
                    " window, at the on-demand price",
                    amount_for(beyond, on_demand),
                    on_demand,
                    beyond,
                    f"{usage_key(item)}/beyond",
                )
            )
    return lines


def _usage_line(
    item: Usage, description: str, amount: int, price: Price, milli: int, source: str
) -> Line:
    return Line(
        kind="usage",
        description=description,
        amount_minor=amount,
        currency=price.currency,
        source=source,
        project_id=item.project_id,
        offering=item.offering,
        gpu_model=item.gpu_model,
        price_plan=item.price_plan,
        region=item.region,
        milli_gpu_seconds=milli,
        unit_price_minor=price.minor_per_gpu_hour,
        allocation_ids=tuple(sorted(item.allocation_ids)),
    )


def rate_reservations(
    windows: Iterable[ReservationWindow], prices: PriceBook, start: datetime, end: datetime
) -> list[Line]:
    """Each reservation for the part of its window inside [start, end), used or not."""
    lines = []
    for window in sorted(windows, key=lambda w: (w.starts_at, str(w.reservation_id))):
        begin, finish = max(window.starts_at, start), min(window.ends_at, end)
        if finish <= begin:
            continue
        seconds = int((finish - begin).total_seconds())
        milli = window.gpus * 1000 * seconds
        price = prices.price(
            offering=window.offering,
            region=window.region,
            plan="reserved",
            gpu_model=window.gpu_model,
        )
        lines.append(
            Line(
                kind="reservation",
                description=f"reserved {window.gpus} x {window.gpu_model},"
                f" {begin:%Y-%m-%d %H:%M} to {finish:%Y-%m-%d %H:%M} UTC",
                amount_minor=amount_for(milli, price),
                currency=price.currency,
                source=f"reservation/{window.reservation_id}",
                project_id=window.project_id,
                offering=window.offering,
                gpu_model=window.gpu_model,
                price_plan="reserved",
                region=window.region,
                milli_gpu_seconds=milli,
                unit_price_minor=price.minor_per_gpu_hour,
            )
        )
    return lines


# --- Storage (issue 32) ---------------------------------------------------------------


@dataclass(frozen=True)
class GbHourPrice:
    """A volume type's price (``catalog.StoragePrice``)."""

    minor_per_gb_hour: int
    currency: str


def gb_hours(gb_seconds: int) -> str:
    return f"{(Decimal(gb_seconds) / 3600).quantize(Decimal('0.0001'), rounding=ROUND_HALF_UP)}"


def rate_storage(usage: Iterable[StorageUsage], prices: Mapping[str, GbHourPrice]) -> list[Line]:
    """A line per volume: its provisioned GB-hours at its type's price, rounded once, half
    up. A type without a price is not billed (an operator who sells storage sets one)."""
    lines = []
    for item in usage:
        price = prices.get(item.volume_type)
        if price is None:
            continue
        lines.append(
            Line(
                kind="storage",
                description=f"volume {item.name} ({item.volume_type}, {item.size_gb} GB),"
                f" {gb_hours(item.gb_seconds)} GB-hours",
                amount_minor=round_half_up(
                    Fraction(item.gb_seconds * price.minor_per_gb_hour, 3600)
                ),
                currency=price.currency,
                source=f"volume/{item.volume_id}",
                project_id=item.project_id,
                unit_price_minor=price.minor_per_gb_hour,
            )
        )
    return lines


def compose(
    *,
    currency: str,
    charges: Sequence[Line],
    commitment_minor: int,
    sla_credits: Sequence[SlaCredit],
    credits: Sequence[Credit],
    tax_rate_percent: Decimal,
    billing_country: str,
) -> Draft:
    """The invoice in ``currency`` from its charges, in the order of the module docstring.
    ``credits`` are in the order they are used (oldest grant first)."""
    lines = [line for line in charges if line.currency == currency]
    charged = sum(line.amount_minor for line in lines)
    if charged < commitment_minor:
        lines.append(
            Line(
                kind="commitment",
                description=f"minimum monthly commitment of {commitment_minor} (charges {charged})",
                amount_minor=commitment_minor - charged,
                currency=currency,
                source="commitment",
            )
        )
        charged = commitment_minor
    base = charged
    for breach in sla_credits:
        if breach.currency != currency:
            continue
        amount = min(breach.amount_minor, base)
        if amount > 0:
            base -= amount
            lines.append(Line("sla_credit", breach.description, -amount, currency, breach.source))
    base = _apply(lines, credits, "promotional", base, currency)
    tax = round_half_up(base * Fraction(tax_rate_percent) / 100)
    if tax:
        lines.append(
            Line(
                kind="tax",
                description=f"tax {billing_country} {tax_rate_percent.normalize()} %",
                amount_minor=tax,
                currency=currency,
                source=f"tax/{billing_country}",
            )
        )
    due = _apply(lines, credits, "prepaid", base + tax, currency)
    return Draft(
        currency=currency,
        lines=tuple(lines),
        subtotal_minor=charged,
        credits_minor=charged - base + (base + tax - due),
        tax_minor=tax,
        total_minor=due,
    )


def _apply(
    lines: list[Line], credits: Sequence[Credit], kind: str, base: int, currency: str
) -> int:
    for credit in credits:
        if credit.kind != kind or credit.currency != currency:
            continue
        amount = min(credit.remaining_minor, base)
        if amount > 0:
            base -= amount
            lines.append(
                Line(
                    kind=f"{kind}_credit",
                    description=f"{kind} credit",
                    amount_minor=-amount,
                    currency=currency,
                    source=f"credit/{credit.credit_id}",
                )
            )
    return base
