"""SLA breaches, computed from the scheduler's events, and the credits they are worth.

Per workload of an offering with an ``SlaDefinition``, from its allocations' grants, runs and
releases:

- **provisioning**: an allocation is billed from its grant; when it took longer than
  ``max_provisioning_s`` to run (``WorkloadRunning``, or its release if it never ran), the GPU
  time from grant to run is credited at the workload's price.
- **availability** (inference services): a release with reason ``node_failure`` starts a
  downtime that lasts until the workload runs again (or until the month ends while it waits).
  Availability is ``1 - downtime / service time`` over the month, service time running from
  its first run in the month (or the month's start) to its end (or the month's end). Below the
  promised percentage, ``availability_credit_percent`` of the workload's charge for the month
  is credited.

A breach belongs to the month in which it ended; the services credit it on the next month's
invoice, as finalized invoices never change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from uuid import UUID

from billing.money import round_half_up
from billing.rating import PriceBook, SlaCredit, Unpriced, amount_for
from scheduler import events as sev

SCHEDULER_TYPES = frozenset(
    {
        sev.WorkloadSubmitted.event_type,
        sev.AllocationGranted.event_type,
        sev.WorkloadRunning.event_type,
        sev.AllocationReleased.event_type,
        sev.WorkloadPreempted.event_type,
        sev.WorkloadCancelled.event_type,
    }
)


@dataclass(frozen=True)
class Promise:
    availability_percent: Decimal | None
    availability_credit_percent: Decimal
    max_provisioning_s: int | None


@dataclass
class Run:
    allocation_id: UUID
    gpu_milli: int  # all of it
    granted_at: datetime
    running_at: datetime | None = None
    released_at: datetime | None = None
    reason: str = ""
    requeued: bool = False


@dataclass
class Timeline:
    workload_id: UUID
    organization_id: UUID
    name: str
    offering: str | None
    price_plan: str
    cluster_id: UUID
    runs: dict[UUID, Run] = field(default_factory=dict)
    cancelled_at: datetime | None = None


def timelines(
    events: Iterable[tuple[str, str, datetime, Mapping[str, object]]],
) -> dict[UUID, Timeline]:
    """Workload timelines from ``(type, stream id, recorded_at, data)`` in log order."""
    workloads: dict[UUID, Timeline] = {}
    by_allocation: dict[str, Timeline] = {}
    for type_name, stream_id, recorded_at, data in events:
        if type_name == sev.WorkloadSubmitted.event_type:
            workloads[UUID(str(data["workload_id"]))] = Timeline(
                workload_id=UUID(str(data["workload_id"])),
                organization_id=UUID(str(data["organization_id"])),
                name=str(data["name"]),
                offering=data["offering"] and str(data["offering"]),  # type: ignore[arg-type]
                price_plan=str(data["price_plan"]),
                cluster_id=UUID(str(data["cluster_id"])),
            )
        elif type_name == sev.AllocationGranted.event_type:
            timeline = workloads.get(UUID(str(data["workload_id"])))
            if timeline is None:
                continue
            placements: list[dict[str, object]] = data["placements"]  # type: ignore[assignment]
            allocation = str(data["allocation_id"])
            timeline.runs[UUID(allocation)] = Run(
                allocation_id=UUID(allocation),
                gpu_milli=sum(len(p["gpus"]) * int(p["gpu_milli"]) for p in placements),  # type: ignore[arg-type,call-overload]
                granted_at=_at(data["granted_at"]),
            )
            by_allocation[allocation] = timeline
        elif type_name == sev.WorkloadCancelled.event_type:
            if (timeline := workloads.get(UUID(stream_id))) is not None:
                timeline.cancelled_at = recorded_at
        else:
            timeline = by_allocation.get(str(data.get("allocation_id")))
            if timeline is None:
                continue
            run = timeline.runs[UUID(str(data["allocation_id"]))]
            if type_name == sev.WorkloadRunning.event_type:
                run.running_at = _at(data["started_at"])
            elif type_name == sev.AllocationReleased.event_type:
                # As metering: a failed node's run ended at its last heartbeat (``ended_at``).
                run.released_at = _at(data.get("ended_at") or data["released_at"])
                run.reason = str(data["reason"])
                run.requeued = data["status"] == "pending"
            elif type_name == sev.WorkloadPreempted.event_type and run.released_at is None:
                run.released_at, run.reason, run.requeued = recorded_at, "preempted", True
    return workloads


def _at(value: object) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def credits_for(
    timeline: Timeline,
    promise: Promise,
    *,
    region: str | None,
    prices: PriceBook,
    start: datetime,
    end: datetime,
) -> list[SlaCredit]:
    """The breaches of one workload that ended in [start, end), each a credit."""
    try:
        # SLAs are per offering, so the catalog price applies (no default per GPU model).
        price = prices.price(
            offering=timeline.offering, region=region, plan=timeline.price_plan, gpu_model=""
        )
    except Unpriced:
        return []
    credits: list[SlaCredit] = []
    runs = sorted(timeline.runs.values(), key=lambda r: r.granted_at)
    if promise.max_provisioning_s is not None:
        for run in runs:
            ready = run.running_at or run.released_at
            if ready is None or not start <= ready < end:
                continue
            waited = int((ready - run.granted_at).total_seconds())
            if waited > promise.max_provisioning_s:
                credits.append(
                    SlaCredit(
                        source=f"sla/provisioning/{run.allocation_id}",
                        description=f"SLA {timeline.offering}: allocation {run.allocation_id} of"
                        f" {timeline.name} took {waited} s to run (promised"
                        f" {promise.max_provisioning_s} s); its GPU time until then",
                        amount_minor=amount_for(run.gpu_milli * waited, price),
                        currency=price.currency,
                    )
                )
    if promise.availability_percent is not None:
        charge = _charge(runs, price_minor=price.minor_per_gpu_hour, start=start, end=end)
        credit = _availability_credit(
            timeline, promise, runs, currency=price.currency, charge=charge, start=start, end=end
        )
        if credit is not None:
            credits.append(credit)
    return credits


def _charge(runs: list[Run], *, price_minor: int, start: datetime, end: datetime) -> Fraction:
    """The workload's exact charge in [start, end), as metering bills it (grant to release)."""
    milli = 0
    for run in runs:
        begin, finish = max(run.granted_at, start), min(run.released_at or end, end)
        if finish > begin:
            milli += run.gpu_milli * int((finish - begin).total_seconds())
    return Fraction(milli * price_minor, 3_600_000)


def _availability_credit(
    timeline: Timeline,
    promise: Promise,
    runs: list[Run],
    *,
    currency: str,
    charge: Fraction,
    start: datetime,
    end: datetime,
) -> SlaCredit | None:
    started = [r.running_at for r in runs if r.running_at is not None]
    if not started:
        return None
    service_start = max(min(started), start)
    last = runs[-1]
    finished = last.released_at if last.released_at and not last.requeued else None
    service_end = min(finished or timeline.cancelled_at or end, end)
    if service_end <= service_start:
        return None
    down_seconds = 0
    for index, run in enumerate(runs):
        if run.reason != "node_failure" or run.released_at is None:
            continue
        later = [r.running_at for r in runs[index + 1 :] if r.running_at is not None]
        back = min(later) if later else (timeline.cancelled_at or end)
        begin, finish = max(run.released_at, service_start), min(back, service_end)
        if finish > begin:
            down_seconds += int((finish - begin).total_seconds())
    service_seconds = int((service_end - service_start).total_seconds())
    availability = Fraction(service_seconds - down_seconds, service_seconds) * 100
    promised = Fraction(promise.availability_percent or 0)
    if down_seconds == 0 or availability >= promised:
        return None
    amount = round_half_up(charge * Fraction(promise.availability_credit_percent) / 100)
    promised_text = (promise.availability_percent or Decimal(0)).normalize()
    if amount <= 0:
        return None
    return SlaCredit(
        source=f"sla/availability/{timeline.workload_id}/{start:%Y-%m}",
        description=f"SLA {timeline.offering}: {timeline.name} available"
        f" {_percent(availability)} % in {start:%Y-%m}"
        f" (promised {promised_text} %),"
        f" down {down_seconds} s after node failures;"
        f" {promise.availability_credit_percent.normalize()} % of its charge",
        amount_minor=amount,
        currency=currency,
    )


def _percent(value: Fraction) -> str:
    return f"{Decimal(value.numerator) / Decimal(value.denominator):.3f}"


def breaches(
    workloads: Mapping[UUID, Timeline],
    promises: Mapping[str, Promise],
    *,
    region_of_cluster: Mapping[UUID, str],
    prices: PriceBook,
    start: datetime,
    end: datetime,
) -> dict[UUID, list[SlaCredit]]:
    """SLA credits per organization for breaches that ended in [start, end)."""
    found: dict[UUID, list[SlaCredit]] = defaultdict(list)
    for timeline in workloads.values():
        promise = promises.get(timeline.offering or "")
        if promise is None:
            continue
        found[timeline.organization_id] += credits_for(
            timeline,
            promise,
            region=region_of_cluster.get(timeline.cluster_id),
            prices=prices,
            start=start,
            end=end,
        )
    return dict(found)
