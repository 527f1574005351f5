"""Reading usage: totals grouped by any dimensions over a window, open allocations included.

A window ``[start, end)`` takes three parts, all by the rule of ``metering.intervals``:
closed day slices wholly inside it (summed by the database), slices it cuts (at most the two
days at its edges, clipped here), and allocations still open, metered up to
``min(now, end)`` on the fly (nothing is written for "now"). The open part is as fresh as the
usage consumer: an allocation released after its checkpoint still counts as open.

Built on it: the usage lines billing rates (``usage_lines``), the month's usage budgets and
quotas are held against, and the hard stop of a spent budget (``budget_refusal``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID, uuid5

from django.db.models import Q, QuerySet, Sum
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from inventory.models import Cluster
from metering.intervals import (
    day_slices,
    from_us,
    gpu_hours,
    gpu_seconds,
    metered,
    month_of,
    to_us,
)
from metering.models import Budget, BudgetAlert, OpenAllocation, UsageSlice
from metering.storage import StorageUsage, provisioned_gb_seconds
from neocloud.core.errors import ValidationFailed
from storage.models import Volume
from tenants.access import Action, Actor
from tenants.models import Organization

# The dimensions a caller may group by, and the column each is read from ("region" from the
# cluster, resolved when read: the fleet may be renamed, the log may not).
DIMENSIONS: dict[str, str] = {
    "organization": "organization_id",
    "project": "project_id",
    "offering": "offering",
    "gpu_model": "gpu_model",
    "price_plan": "price_plan",
    "region": "cluster_id",
    "workload": "workload_id",
    "day": "day",
}
ALLOCATION = "allocation"  # for billing's lines only
COLUMNS = {**DIMENSIONS, ALLOCATION: "allocation_id"}
MAX_DAILY_DAYS = 400
BUDGET_NAMESPACE = UUID("4f1d0c1e-6d35-4b8e-9a43-0c0f5b7f6a11")

Key = tuple[Any, ...]


@dataclass(frozen=True)
class UsageQuery:
    """A checked request for usage."""

    start: datetime
    end: datetime
    group_by: tuple[str, ...]
    organization_id: UUID | None = None
    project_id: UUID | None = None


def check_usage_query(
    params: Mapping[str, str], *, now: datetime, group_by_allowed: bool = True
) -> UsageQuery:
    """Validate untrusted query parameters; ``from``/``to`` default to the current UTC
    month, a date alone means its UTC midnight, a time without an offset is UTC."""
    errors: dict[str, list[str]] = {}
    group_by: tuple[str, ...] = ()
    if group_by_allowed and params.get("group_by"):
        group_by = tuple(part.strip() for part in params["group_by"].split(","))
        unknown = [g for g in group_by if g not in DIMENSIONS]
        if unknown:
            errors["group_by"] = [
                f"unknown dimension {', '.join(unknown)}; known: {', '.join(DIMENSIONS)}"
            ]
        elif len(set(group_by)) != len(group_by):
            errors["group_by"] = ["a dimension is named twice"]
    month_start, month_end = month_of(now)
    start = _instant(params, "from", month_start, errors)
    end = _instant(params, "to", month_end, errors)
    if "from" not in errors and "to" not in errors and start >= end:
        errors["to"] = ["must be after from"]
    scope = {name: _uuid(params, name, errors) for name in ("organization", "project")}
    if errors:
        raise ValidationFailed("invalid usage query", fields=errors)
    return UsageQuery(
        start=start,
        end=end,
        group_by=group_by,
        organization_id=scope["organization"],
        project_id=scope["project"],
    )


def _instant(
    params: Mapping[str, str], name: str, default: datetime, errors: dict[str, list[str]]
) -> datetime:
    raw = params.get(name)
    if not raw:
        return default
    try:
        parsed = parse_datetime(raw)
        if parsed is None:
            day = parse_date(raw)
            parsed = datetime.combine(day, time(), tzinfo=UTC) if day else None
    except ValueError:
        parsed = None
    if parsed is None:
        errors[name] = ["expected an ISO 8601 date or date-time"]
        return default
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if not datetime(1970, 1, 1, tzinfo=UTC) <= parsed <= datetime(9000, 1, 1, tzinfo=UTC):
        errors[name] = ["out of range"]
        return default
    return parsed


def _uuid(params: Mapping[str, str], name: str, errors: dict[str, list[str]]) -> UUID | None:
    raw = params.get(name)
    if not raw:
        return None
    try:
        return UUID(raw)
    except ValueError:
        errors[name] = ["expected a UUID"]
        return None


def usage_visible_to(actor: Actor) -> tuple[QuerySet[UsageSlice], QuerySet[OpenAllocation]]:
    """The usage the actor may read (``Action.ORDER_READ``): closed slices and open
    allocations."""
    return (
        actor.scope(UsageSlice.objects.all(), Action.ORDER_READ),
        actor.scope(OpenAllocation.objects.all(), Action.ORDER_READ),
    )


def usage_by(
    *,
    slices: QuerySet[UsageSlice],
    open_allocations: QuerySet[OpenAllocation],
    start: datetime,
    end: datetime,
    group_by: Sequence[str],
    now: datetime,
) -> dict[Key, int]:
    """Milli-GPU-seconds in ``[start, end)`` per key (one value per name of ``group_by``, in
    its order; ``region`` still a cluster id: see ``with_regions``)."""
    columns = [COLUMNS[name] for name in group_by]
    totals: dict[Key, int] = defaultdict(int)
    inside = Q(start_at__gte=start, end_at__lte=end)
    whole = slices.filter(inside).order_by()
    if columns:
        for *key, total in whole.values_list(*columns).annotate(total=Sum("milli_gpu_seconds")):
            totals[tuple(key)] += total
    else:
        total = whole.aggregate(total=Sum("milli_gpu_seconds"))["total"]
        if total is not None:
            totals[()] += total
    start_us, end_us = to_us(start), to_us(end)
    cut = slices.filter(start_at__lt=end, end_at__gt=start).exclude(inside)
    for *key, milli, granted_at, slice_start, slice_end in cut.values_list(
        *columns, "milli_gpus", "granted_at", "start_at", "end_at"
    ):
        totals[tuple(key)] += metered(
            milli,
            to_us(granted_at),
            max(to_us(slice_start), start_us),
            min(to_us(slice_end), end_us),
        )
    until_us = min(to_us(now), end_us)
    day_at = group_by.index("day") if "day" in group_by else None
    for *key, milli, granted_at in open_allocations.filter(
        granted_at__lt=from_us(until_us)
    ).values_list(
        *(c if c != "day" else "granted_at" for c in columns), "milli_gpus", "granted_at"
    ):
        granted_us = to_us(granted_at)
        for day, piece_start, piece_end in day_slices(max(granted_us, start_us), until_us):
            if day_at is not None:
                key[day_at] = day
            totals[tuple(key)] += metered(milli, granted_us, piece_start, piece_end)
    return dict(totals)


def with_regions(totals: dict[Key, int], group_by: Sequence[str]) -> dict[Key, int]:
    """Replace the cluster id at ``region``'s place by the cluster's region slug (None for a
    cluster no longer known), merging clusters of one region."""
    if "region" not in group_by:
        return totals
    at = group_by.index("region")
    region_of = dict(
        Cluster.objects.filter(id__in={key[at] for key in totals}).values_list("id", "region__slug")
    )
    merged: dict[Key, int] = defaultdict(int)
    for key, total in totals.items():
        merged[(*key[:at], region_of.get(key[at]), *key[at + 1 :])] += total
    return dict(merged)


def usage_rows(
    *,
    slices: QuerySet[UsageSlice],
    open_allocations: QuerySet[OpenAllocation],
    query: UsageQuery,
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per group, in key order: the dimensions, ``gpu_seconds`` (a decimal string)
    and ``milli_gpu_seconds``."""
    slices, open_allocations = _filtered(slices, open_allocations, query)
    totals = with_regions(
        usage_by(
            slices=slices,
            open_allocations=open_allocations,
            start=query.start,
            end=query.end,
            group_by=query.group_by,
            now=now,
        ),
        query.group_by,
    )
    rows = []
    for key in sorted(totals, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        row: dict[str, Any] = {
            name: _shown(value) for name, value in zip(query.group_by, key, strict=True)
        }
        row["gpu_seconds"] = gpu_seconds(totals[key])
        row["milli_gpu_seconds"] = totals[key]
        rows.append(row)
    return rows


def usage_daily(
    *,
    slices: QuerySet[UsageSlice],
    open_allocations: QuerySet[OpenAllocation],
    query: UsageQuery,
    now: datetime,
) -> list[dict[str, Any]]:
    """Every UTC day the window touches, in order, with its usage (zero included): a chart's
    series."""
    if query.end - query.start > timedelta(days=MAX_DAILY_DAYS):
        raise ValidationFailed(
            f"a daily series spans at most {MAX_DAILY_DAYS} days",
            fields={"to": [f"at most {MAX_DAILY_DAYS} days after from"]},
        )
    slices, open_allocations = _filtered(slices, open_allocations, query)
    totals = usage_by(
        slices=slices,
        open_allocations=open_allocations,
        start=query.start,
        end=query.end,
        group_by=("day",),
        now=now,
    )
    day = query.start.astimezone(UTC).date()
    last = (query.end - timedelta(microseconds=1)).astimezone(UTC).date()
    series = []
    while day <= last:
        total = totals.get((day,), 0)
        series.append(
            {"day": day.isoformat(), "gpu_seconds": gpu_seconds(total), "milli_gpu_seconds": total}
        )
        day += timedelta(days=1)
    return series


def _filtered(
    slices: QuerySet[UsageSlice], open_allocations: QuerySet[OpenAllocation], query: UsageQuery
) -> tuple[QuerySet[UsageSlice], QuerySet[OpenAllocation]]:
    narrow: dict[str, UUID] = {}
    if query.organization_id:
        narrow["organization_id"] = query.organization_id
    if query.project_id:
        narrow["project_id"] = query.project_id
    return slices.filter(**narrow), open_allocations.filter(**narrow)


def _shown(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    return value if value != "" else None


def month_usage(*, organization_id: UUID, project_id: UUID | None, now: datetime) -> int:
    """Milli-GPU-seconds of the UTC month of ``now`` so far, of an organization or one of its
    projects."""
    return sum(month_usage_by_model(organization_id, project_id, now).values())


def budgets_month_usage(budgets: Sequence[Budget], now: datetime) -> dict[UUID, int]:
    """Milli-GPU-seconds of the UTC month of ``now`` so far against each budget (its
    organization's, or its project's), for a page of budgets in one pass over the usage."""
    organizations = {budget.organization_id for budget in budgets}
    start, end = month_of(now)
    totals = usage_by(
        slices=UsageSlice.objects.filter(organization_id__in=organizations),
        open_allocations=OpenAllocation.objects.filter(organization_id__in=organizations),
        start=start,
        end=end,
        group_by=("organization", "project"),
        now=now,
    )
    by_organization: dict[UUID, int] = defaultdict(int)
    for (organization_id, _), total in totals.items():
        by_organization[organization_id] += total
    return {
        budget.id: (
            by_organization[budget.organization_id]
            if budget.project_id is None
            else totals.get((budget.organization_id, budget.project_id), 0)
        )
        for budget in budgets
    }


def month_usage_by_model(
    organization_id: UUID, project_id: UUID | None, now: datetime
) -> dict[str, int]:
    """Milli-GPU-seconds per GPU model of the UTC month of ``now`` so far, of an organization
    or one of its projects: what quotas' monthly GPU-hours are held against."""
    narrow: dict[str, UUID] = {"organization_id": organization_id}
    if project_id is not None:
        narrow["project_id"] = project_id
    start, end = month_of(now)
    totals = usage_by(
        slices=UsageSlice.objects.filter(**narrow),
        open_allocations=OpenAllocation.objects.filter(**narrow),
        start=start,
        end=end,
        group_by=("gpu_model",),
        now=now,
    )
    return {model: total for (model,), total in totals.items()}


def budget_alerts(budget: Budget, month: str) -> set[int]:
    """The thresholds of ``budget`` already recorded in ``month``."""
    return set(
        BudgetAlert.objects.filter(budget_id=budget.id, month=month).values_list(
            "threshold_percent", flat=True
        )
    )


@dataclass(frozen=True)
class UsageLine:
    """Usage of one project on one set of terms in a period, for billing to rate."""

    project_id: UUID
    offering: str | None
    gpu_model: str
    price_plan: str
    region: str | None
    milli_gpu_seconds: int
    allocation_ids: tuple[UUID, ...]


def usage_lines(
    organization_id: UUID,
    start: datetime,
    end: datetime,
    workload_ids: Collection[UUID] | None = None,
) -> list[UsageLine]:
    """The organization's usage in ``[start, end)`` (of ``workload_ids`` only, when given):
    closed usage within it, and allocations still open metered up to ``min(now, end)``. One
    line per (project, offering, GPU model, price plan, region), in that order."""
    group_by = ("project", "offering", "gpu_model", "price_plan", "region", ALLOCATION)
    slices = UsageSlice.objects.filter(organization_id=organization_id)
    open_allocations = OpenAllocation.objects.filter(organization_id=organization_id)
    if workload_ids is not None:
        slices = slices.filter(workload_id__in=workload_ids)
        open_allocations = open_allocations.filter(workload_id__in=workload_ids)
    totals = with_regions(
        usage_by(
            slices=slices,
            open_allocations=open_allocations,
            start=start,
            end=end,
            group_by=group_by,
            now=timezone.now(),
        ),
        group_by,
    )
    milli: dict[tuple[UUID, str, str, str, str | None], int] = defaultdict(int)
    allocations: dict[tuple[UUID, str, str, str, str | None], set[UUID]] = defaultdict(set)
    for (project, offering, model, plan, region, allocation), total in totals.items():
        terms = (project, offering, model, plan, region)
        milli[terms] += total
        allocations[terms].add(allocation)
    return [
        UsageLine(
            project_id=terms[0],
            offering=terms[1] or None,
            gpu_model=terms[2],
            price_plan=terms[3],
            region=terms[4],
            milli_gpu_seconds=milli[terms],
            allocation_ids=tuple(sorted(allocations[terms])),
        )
        for terms in sorted(milli, key=lambda t: tuple(str(v) for v in t))
    ]


def budget_id_for(organization_id: UUID, project_id: UUID | None) -> UUID:
    """One budget per organization and per project: setting it again replaces it."""
    return uuid5(BUDGET_NAMESPACE, f"{organization_id}/{project_id or ''}")


def budget_refusal(organization: Organization) -> str | None:
    """The payment check of a hard stop: the organization's budget for this UTC month is
    spent (open allocations counted up to now)."""
    budget = Budget.objects.filter(id=budget_id_for(organization.id, None), hard_stop=True).first()
    if budget is None:
        return None
    now = timezone.now()
    used = month_usage(organization_id=organization.id, project_id=None, now=now)
    if used < budget.limit_milli_gpu_seconds:
        return None
    return (
        f"budget exhausted: organization {organization.slug} used {gpu_hours(used)} of"
        f" {gpu_hours(budget.limit_milli_gpu_seconds)} GPU-hours in"
        f" {month_of(now)[0]:%Y-%m}"
    )


# --- Storage (issue 32) -----------------------------------------------------------------


def storage_usage_for(organization_id: UUID, start: datetime, end: datetime) -> list[StorageUsage]:
    """Each volume of the organization provisioned in [start, end), with its GB-seconds
    there (``metering.storage``)."""
    rows = Volume.objects.filter(organization_id=organization_id, created_at__lt=end).exclude(
        deleted_at__lte=start
    )
    found = []
    for volume in rows.order_by("created_at", "id"):
        seconds = provisioned_gb_seconds(
            volume.size_gb, volume.created_at, volume.deleted_at, start, end
        )
        if seconds:
            found.append(
                StorageUsage(
                    volume_id=volume.pk,
                    project_id=volume.project_id,
                    name=volume.name,
                    volume_type=volume.type,
                    size_gb=volume.size_gb,
                    gb_seconds=seconds,
                )
            )
    return found
