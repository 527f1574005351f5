"""A run's states as its workload's stream records them: provisioning, running, and its end,
after which the workload is requeued or ends as its policy says.

Called by ``scheduler.runs`` inside its transactions: ``run_holder`` takes the log's append
lock, then the workload's row (``workload_stream``), and the others append with the version
read under it. A run's end asks for a cycle and a drain check of its nodes once it commits;
a final status is told to whoever follows the workload (its order) on commit.
"""

from __future__ import annotations

import uuid

from django.utils import timezone

from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.models import FINAL_STATUSES, Allocation, Workload, WorkloadStatus
from scheduler.services.workload_stream import (
    append_workload,
    held_allocation,
    locked_workload,
    released,
)
from scheduler.specs import RestartPolicy, WorkloadKind
from tenants.access import Actor


def run_holder(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> Workload | None:
    """The workload, locked, if it still holds ``allocation_id``."""
    workload = locked_workload(workload_id)
    if workload is None or str(workload.allocation_id) != str(allocation_id):
        return None
    return workload


def run_provisioning(
    *, actor: Actor, workload: Workload, placements: list[dict[str, object]]
) -> None:
    append_workload(
        actor,
        workload,
        [
            ev.WorkloadProvisioning(
                allocation_id=held_allocation(workload),
                placements=[ev.PlacementData.model_validate(p) for p in placements],
            )
        ],
    )


def run_started(*, actor: Actor, workload: Workload, details: dict[str, str]) -> None:
    append_workload(
        actor,
        workload,
        [
            ev.WorkloadRunning(
                allocation_id=held_allocation(workload),
                started_at=timezone.now(),
                details={k: str(v) for k, v in details.items()},
            )
        ],
    )


def run_ended(*, actor: Actor, workload: Workload, reason: str, message: str) -> str:
    """Release the run's GPUs; the workload is requeued or ends as its policy says.
    Returns the status it is left in."""
    status = _after_run(workload, reason)
    allocation = Allocation.objects.get(pk=held_allocation(workload))
    append_workload(actor, workload, [released(workload, reason, message, status)])
    triggers.drain_check([p["node_id"] for p in allocation.placements])
    triggers.cycle_wanted(workload.cluster_id)
    if status in FINAL_STATUSES:
        hooks.workload_ended.on_commit(Workload.objects.get(pk=workload.pk))
    return status


def run_discarded(*, actor: Actor, workload: Workload) -> None:
    """Give back GPUs granted to a workload that had already ended (its run ended while a
    scheduler preempted it, and that scheduler granted it again): its status stays."""
    append_workload(
        actor,
        workload,
        [released(workload, "superseded", "the workload had already ended", workload.status)],
    )
    triggers.cycle_wanted(workload.cluster_id)


def _after_run(workload: Workload, reason: str) -> str:
    if workload.cancel_requested or reason == "cancelled":
        return WorkloadStatus.CANCELLED
    if reason == "max_runtime":
        return WorkloadStatus.FAILED  # stopped: retrying would overrun again
    service = workload.kind == WorkloadKind.SERVICE
    if reason == "succeeded":
        restart = service and workload.restart_policy == RestartPolicy.ALWAYS
        return WorkloadStatus.PENDING if restart else WorkloadStatus.SUCCEEDED
    # failed, node_failure, lost: counted against the retries.
    if service:
        retry = workload.restart_policy != RestartPolicy.NEVER
    else:
        retry = workload.failures < workload.retry_limit
    return WorkloadStatus.PENDING if retry else WorkloadStatus.FAILED
