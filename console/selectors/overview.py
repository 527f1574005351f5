"""The overview: work held and waiting, GPU-hours this month."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count
from django.utils import timezone

from console.guard import Console
from metering.selectors import month_usage_by_model
from scheduler.models import Allocation, Workload, WorkloadStatus
from tenants.access import Action

WAITING = (WorkloadStatus.PENDING, WorkloadStatus.ADMITTED)


@dataclass(frozen=True)
class Overview:
    gpus_held: dict[str, float]  # GPU model -> GPUs held now
    running: int
    waiting: int
    gpu_hours_month: dict[str, float]  # GPU model -> GPU-hours this month


def overview(console: Console) -> Overview:
    workloads = console.scoped(Workload.objects.all(), Action.WORKLOAD_READ)
    by_status = dict(workloads.values_list("status").annotate(n=Count("id")).order_by())
    held: dict[str, float] = defaultdict(float)
    live = console.scoped(Allocation.objects.all(), Action.WORKLOAD_READ).filter(
        released_at__isnull=True
    )
    for model, milli in live.values_list("gpu_model", "gpu_milli"):
        held[model or "any"] += milli / 1000
    hours: dict[str, float] = {}
    if console.organization is not None:
        month = month_usage_by_model(console.organization.pk, None, timezone.now())
        hours = {model: milli / 1000 / 3600 for model, milli in sorted(month.items())}
    return Overview(
        gpus_held=dict(sorted(held.items())),
        running=by_status.get(WorkloadStatus.RUNNING, 0),
        waiting=sum(by_status.get(s, 0) for s in WAITING),
        gpu_hours_month=hours,
    )
