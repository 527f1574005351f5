"""How much of what a running workload holds it uses: allocation is not utilisation. From the
telemetry its GPUs' node agents last reported (``inventory.Gpu``), so GPUs that are held but
idle show as such."""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.utils import timezone

from inventory.models import Gpu
from scheduler.models import Allocation, Workload, WorkloadStatus

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Utilisation:
    """Of the GPUs placed: how many, their mean utilisation (of those reporting one), the
    memory they use, and whether every one has been idle longer than
    ``GPU_IDLE_FLAG_AFTER_S`` (``idle_since``: since when all were; ``telemetry_at``: the
    oldest of their last reports)."""

    gpus: int
    utilization_pct: float | None
    memory_used_mib: int
    idle: bool
    idle_since: datetime | None
    telemetry_at: datetime


@dataclass(frozen=True)
class _Telemetry:
    utilization_pct: float | None
    memory_used_mib: int | None
    telemetry_at: datetime | None
    idle_since: datetime | None


def placements_utilisation(
    placements: Mapping[K, Sequence[Mapping[str, Any]]], *, now: datetime | None = None
) -> dict[K, Utilisation | None]:
    """The utilisation of each set of placements (an allocation's, or one node's part of it)
    by key, in one query however many; None where no placed GPU has reported yet."""
    now = now or timezone.now()
    nodes = {str(p["node_id"]) for parts in placements.values() for p in parts}
    if not nodes:
        return dict.fromkeys(placements)
    telemetry = {
        (str(node_id), index): _Telemetry(utilization, memory, at, idle)
        for node_id, index, utilization, memory, at, idle in Gpu.objects.filter(
            node_id__in=nodes
        ).values_list(
            "node_id", "index", "utilization_pct", "memory_used_mib", "telemetry_at", "idle_since"
        )
    }
    return {
        key: _utilisation(
            [telemetry.get((str(p["node_id"]), i)) for p in parts for i in p["gpus"]], now
        )
        for key, parts in placements.items()
    }


def _utilisation(gpus: list[_Telemetry | None], now: datetime) -> Utilisation | None:
    reported = [g for g in gpus if g is not None and g.telemetry_at is not None]
    if not reported:
        return None
    utilizations = [g.utilization_pct for g in reported if g.utilization_pct is not None]
    idle_since = [g.idle_since for g in gpus if g is not None and g.idle_since is not None]
    all_idle = len(idle_since) == len(gpus)
    flag_after = timedelta(seconds=settings.GPU_IDLE_FLAG_AFTER_S)
    return Utilisation(
        gpus=len(gpus),
        utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
        memory_used_mib=sum(g.memory_used_mib or 0 for g in reported),
        idle=all_idle and now - max(idle_since) > flag_after,
        idle_since=max(idle_since) if all_idle else None,
        telemetry_at=min(g.telemetry_at for g in reported if g.telemetry_at is not None),
    )


def workloads_utilisation(
    workloads: Iterable[Workload],
    allocations: Mapping[uuid.UUID, Allocation],
    *,
    now: datetime | None = None,
) -> dict[uuid.UUID, Utilisation | None]:
    """The utilisation of each running one of ``workloads`` (its held allocation among
    ``allocations``), by workload id; the others are not in it."""
    running = {
        w.pk: allocations[w.allocation_id].placements
        for w in workloads
        if w.status == WorkloadStatus.RUNNING
        and w.allocation_id is not None
        and w.allocation_id in allocations
    }
    return placements_utilisation(running, now=now) if running else {}
