"""Usage of a UTC month: GPU-hours per day by project and GPU model, from metering's own
reads (``usage_daily``, ``usage_rows``) over the usage the member may read (the API's
``Action.ORDER_READ`` scoping) in the current organization."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from console.guard import Console
from metering.intervals import MILLI_GPU_SECONDS_PER_GPU_HOUR, gpu_hours, gpu_seconds, month_of
from metering.models import OpenAllocation, UsageSlice
from metering.selectors import check_usage_query, usage_daily, usage_rows
from tenants.access import Action
from tenants.models import Project

GROUP_BY = "day,project,gpu_model"


@dataclass(frozen=True)
class UsageRow:
    day: str
    project: str  # its name
    project_id: str
    gpu_model: str
    gpu_hours: str
    gpu_seconds: str


@dataclass(frozen=True)
class MonthUsage:
    month: date  # its first day
    days: list[str]  # every day of the month
    rows: list[UsageRow]  # the days with usage, by day, project and model
    total_gpu_hours: str
    total_gpu_seconds: str
    chart: dict[str, Any]  # the charts' series (``json_script``)


def month_usage(console: Console, month: date, now: datetime) -> MonthUsage:
    """``month``'s usage: what ``GET /api/v1/usage/daily`` and
    ``GET /api/v1/usage?group_by=day,project,gpu_model`` answer for the month and the
    current organization."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    _, end = month_of(start)
    query = check_usage_query(
        {
            "from": start.isoformat(),
            "to": end.isoformat(),
            "group_by": GROUP_BY,
            "organization": str(console.organization.pk) if console.organization else "",
        },
        now=now,
    )
    slices = console.scoped(UsageSlice.objects.all(), Action.ORDER_READ)
    open_allocations = console.scoped(OpenAllocation.objects.all(), Action.ORDER_READ)
    daily = usage_daily(slices=slices, open_allocations=open_allocations, query=query, now=now)
    grouped = usage_rows(slices=slices, open_allocations=open_allocations, query=query, now=now)
    ids = {row["project"] for row in grouped}
    names = {
        str(pk): name for pk, name in Project.objects.filter(pk__in=ids).values_list("pk", "name")
    }
    rows = [
        UsageRow(
            day=row["day"],
            project=names.get(row["project"], row["project"]),
            project_id=row["project"],
            gpu_model=row["gpu_model"],
            gpu_hours=gpu_hours(row["milli_gpu_seconds"]),
            gpu_seconds=row["gpu_seconds"],
        )
        for row in grouped
        if row["milli_gpu_seconds"]
    ]
    total = sum(day["milli_gpu_seconds"] for day in daily)
    days = [day["day"] for day in daily]
    return MonthUsage(
        month=start.date(),
        days=days,
        rows=rows,
        total_gpu_hours=gpu_hours(total),
        total_gpu_seconds=gpu_seconds(total),
        chart={
            "days": days,
            "by_project": _series(days, grouped, "project", names),
            "by_model": _series(days, grouped, "gpu_model", {}),
        },
    )


def _series(
    days: list[str], grouped: list[dict[str, Any]], by: str, names: dict[str, str]
) -> list[dict[str, Any]]:
    """One series of GPU-hours per day for each value of ``by``, in name order."""
    at = {day: i for i, day in enumerate(days)}
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(days))
    for row in grouped:
        label = names.get(row[by], row[by])
        series[label][at[row["day"]]] += row["milli_gpu_seconds"] / MILLI_GPU_SECONDS_PER_GPU_HOUR
    return [{"label": label, "data": series[label]} for label in sorted(series)]
