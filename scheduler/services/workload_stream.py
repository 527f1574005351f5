"""Writing to a workload's stream, shared by the writes of a workload that exists (its
cancellation, its runs' states).

Lock order: the log's append lock, then the workload's row (``locked_workload``), held to
the end of the transaction; the append carries the version read under that lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from events import store
from events.types import DomainEvent
from neocloud.core.transactions import row_lock
from scheduler import events as ev
from scheduler.errors import WorkloadFinished
from scheduler.models import Workload
from tenants.access import Actor


def locked_workload(workload_id: uuid.UUID) -> Workload | None:
    """The workload's row, locked to the end of the transaction, after the log's lock: a
    cycle's append holds the log's lock and then updates workload rows, so taking them in the
    other order could deadlock with it."""
    store.take_append_lock()
    return row_lock(Workload.objects.all()).filter(pk=workload_id).first()


def locked_workloads(workload_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Workload]:
    """``locked_workload`` for many at once: the log's lock, then their rows in one query."""
    store.take_append_lock()
    rows = row_lock(Workload.objects.all()).filter(pk__in=list(workload_ids)).order_by("pk")
    return {w.pk: w for w in rows}


def append_workload(actor: Actor, workload: Workload, changes: Sequence[DomainEvent]) -> None:
    store.append(
        ev.WORKLOAD_STREAM,
        str(workload.pk),
        changes,
        expected_version=workload.version,
        metadata=actor.metadata(workload.organization_id),
    )


def append_workloads(
    actor: Actor, changes: Sequence[tuple[Workload, Sequence[DomainEvent]]]
) -> None:
    """``append_workload`` for many workloads in one append (``store.append_streams``)."""
    if not changes:
        return
    store.append_streams(
        [
            store.StreamAppend(
                ev.WORKLOAD_STREAM,
                str(workload.pk),
                events,
                workload.version,
                actor.metadata(workload.organization_id),
            )
            for workload, events in changes
        ]
    )


def released(
    workload: Workload,
    reason: str,
    message: str,
    status: str,
    *,
    ended_at: datetime | None = None,
) -> ev.AllocationReleased:
    """The release of the GPUs the workload holds, leaving it in ``status``; ``ended_at``:
    when the run ended before that (never after the release)."""
    now = timezone.now()
    return ev.AllocationReleased(
        allocation_id=held_allocation(workload),
        cluster_id=workload.cluster_id,
        reason=reason,
        message=message,
        status=status,
        released_at=now,
        ended_at=None if ended_at is None else min(ended_at, now),
    )


def held_allocation(workload: Workload) -> uuid.UUID:
    """The allocation the workload holds; callers have checked it holds one."""
    if workload.allocation_id is None:
        raise WorkloadFinished(f"workload {workload.pk} holds no GPUs")
    return workload.allocation_id
