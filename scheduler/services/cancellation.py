"""Cancelling a workload: a waiting one ends at once; a holding one releases its GPUs and
its run is stopped once that commits.

Takes the log's append lock, then the workload's row (``workload_stream``); whoever follows
the workload (its order) is told on commit.
"""

from __future__ import annotations

from django.db import transaction

from events.types import DomainEvent
from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.errors import WorkloadFinished
from scheduler.models import FINAL_STATUSES, Workload, WorkloadStatus
from scheduler.services.workload_stream import append_workload, locked_workload, released
from tenants.access import Action, Actor
from tenants.models import Organization


def workload_cancel(*, actor: Actor, workload: Workload, reason: str = "") -> Workload:
    """Cancel: a waiting workload at once; a holding one releases its GPUs (its run is
    stopped once this commits)."""
    organization = Organization.objects.get(pk=workload.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization, starting=False)  # suspended too
    reason = reason or f"cancelled by {actor.label}"
    with transaction.atomic():
        locked = locked_workload(workload.pk)
        if locked is None:
            raise WorkloadFinished("no such workload")
        workload = locked
        if workload.status in FINAL_STATUSES:
            if workload.status == WorkloadStatus.CANCELLED:
                return workload
            raise WorkloadFinished(f"workload already {workload.status}")
        changes: list[DomainEvent] = [
            ev.WorkloadCancelRequested(cluster_id=workload.cluster_id, reason=reason)
        ]
        if workload.allocation_id is not None:
            changes.append(released(workload, "cancelled", reason, WorkloadStatus.CANCELLED))
            triggers.run_stop(workload.pk, workload.allocation_id)
        else:
            changes.append(ev.WorkloadCancelled(cluster_id=workload.cluster_id, reason=reason))
        append_workload(actor, workload, changes)
        triggers.cycle_wanted(workload.cluster_id)
        ended = Workload.objects.get(pk=workload.pk)
        hooks.workload_ended.on_commit(ended)
    return ended
