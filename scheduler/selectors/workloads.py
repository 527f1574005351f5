"""Reads of workloads beyond their row: what a page of them shows (placement, why each waits,
its place in line), and a workload's own stream."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from events.models import Event
from scheduler import events as ev
from scheduler.models import WAITING_STATUSES, Allocation, Workload, WorkloadWait
from scheduler.selectors.utilisation import Utilisation, workloads_utilisation


@dataclass(frozen=True)
class WorkloadState:
    """A workload's state beside its row: the allocation it holds now (and while it runs
    how much of it is used), and while it waits why (as of the last cycle) and its place in
    its project's queue (1: next)."""

    placement: Allocation | None = None
    pending_reason: WorkloadWait | None = None
    queue_position: int | None = None
    utilisation: Utilisation | None = None


def workload_states(workloads: Iterable[Workload]) -> dict[uuid.UUID, WorkloadState]:
    """The state of each of ``workloads`` by id, in four queries however many they are."""
    workloads = list(workloads)
    held = [w.allocation_id for w in workloads if w.allocation_id is not None]
    allocations = {a.pk: a for a in Allocation.objects.filter(pk__in=held)} if held else {}
    waiting = [w.pk for w in workloads if w.status in WAITING_STATUSES]
    waits: dict[uuid.UUID, WorkloadWait] = {}
    positions: dict[uuid.UUID, int] = {}
    if waiting:
        waits = {w.workload_id: w for w in WorkloadWait.objects.filter(workload_id__in=waiting)}
        positions = dict(
            Workload.objects.filter(pk__in=waiting)
            .annotate(ahead=Coalesce(_ahead_in_queue(), 0))
            .values_list("pk", "ahead")
        )
    utilisations = workloads_utilisation(workloads, allocations)
    return {
        w.pk: WorkloadState(
            placement=allocations.get(w.allocation_id) if w.allocation_id else None,
            pending_reason=waits.get(w.pk),
            queue_position=positions[w.pk] + 1 if w.pk in positions else None,
            utilisation=utilisations.get(w.pk),
        )
        for w in workloads
    }


def _ahead_in_queue() -> Subquery:
    """How many waiting workloads of the outer one's project go before it: higher priority
    first, then arrival."""
    return Subquery(
        Workload.objects.filter(project_id=OuterRef("project_id"), status__in=WAITING_STATUSES)
        .filter(
            Q(priority__gt=OuterRef("priority"))
            | Q(priority=OuterRef("priority"), submitted_at__lt=OuterRef("submitted_at"))
        )
        .order_by()
        .values("project_id")
        .annotate(n=Count("pk"))
        .values("n")
    )


def workload_events(workload: Workload) -> QuerySet[Event]:
    """The workload's own stream, oldest first: submitted, admitted, placed, ran, ended."""
    return Event.objects.filter(
        stream_type=ev.WORKLOAD_STREAM, stream_id=str(workload.pk)
    ).order_by("version")
