"""Notices: a run NeoCloud is about to stop for its own reasons (preempted, its
``max_runtime_s`` ending) is told so ``PREEMPTION_NOTICE_S`` before it is killed, to save a
checkpoint. The engine decides preemptions; this records that the run was told, in the
workload's stream, where its owner reads it. What the agent does with it (SIGTERM, the notice
file, SIGKILL at the deadline) is derived from the allocation when the agent asks
(``execution.selectors``).

Lock: the log's append lock, then the workload's row (``locked_workload``). Each run gets one
notice: a second ask for the same allocation appends nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings

from events.models import Event
from scheduler import events as ev
from scheduler.services.workload_stream import append_workload, locked_workload
from tenants.access import Actor


def notice_s() -> float:
    """The notice a run gets: the operator's, never shorter than the agent's stop grace."""
    return max(float(settings.PREEMPTION_NOTICE_S), float(settings.AGENT_STOP_GRACE_S))


def run_notice_give(
    *,
    actor: Actor,
    workload_id: uuid.UUID,
    allocation_id: uuid.UUID,
    reason: str,
    deadline: datetime,
) -> bool:
    """Record that the run of ``allocation_id`` is told it ends at ``deadline``; whether this
    call recorded it (False: told before, or the workload is gone)."""
    workload = locked_workload(workload_id)
    if workload is None or run_notice_of(workload_id, allocation_id) is not None:
        return False
    append_workload(
        actor,
        workload,
        [
            ev.RunNoticeGiven(
                allocation_id=allocation_id, reason=reason, deadline=deadline, notice_s=notice_s()
            )
        ],
    )
    return True


def run_notice_of(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> dict[str, object] | None:
    """The notice the run was given, as recorded, or None."""
    row = (
        Event.objects.filter(
            stream_type=ev.WORKLOAD_STREAM,
            stream_id=str(workload_id),
            type=ev.RunNoticeGiven.event_type,
            data__allocation_id=str(allocation_id),
        )
        .values_list("data", flat=True)
        .first()
    )
    return dict(row) if row is not None else None
