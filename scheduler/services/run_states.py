"""A run's states as its workload's stream records them: provisioning, running, and its end,
after which the workload is requeued or ends as its policy says.

Called by ``scheduler.runs`` inside its transactions: ``run_holder`` takes the log's append
lock, then the workload's row (``workload_stream``), and the others append with the version
read under it. A run's end asks for a cycle and a drain check of its nodes once it commits;
a final status is told to whoever follows the workload (its order) on commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.models import FINAL_STATUSES, Allocation, Workload, WorkloadStatus
from scheduler.services.workload_stream import (
    append_workload,
    append_workloads,
    held_allocation,
    locked_workload,
    locked_workloads,
    released,
)
from scheduler.specs import RestartPolicy, WorkloadKind
from tenants.access import Actor

Pair = tuple[uuid.UUID, uuid.UUID]  # (workload, allocation)


def run_holder(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> Workload | None:
    """The workload, locked, if it still holds ``allocation_id``."""
    workload = locked_workload(workload_id)
    if workload is None or str(workload.allocation_id) != str(allocation_id):
        return None
    return workload


def run_holders(pairs: Sequence[Pair]) -> dict[Pair, Workload]:
    """``run_holder`` for a batch of runs, in one query: those whose workload still holds
    the allocation."""
    rows = locked_workloads([w for w, _ in pairs])
    return {(w, a): rows[w] for w, a in pairs if w in rows and str(rows[w].allocation_id) == str(a)}


def run_provisioning(
    *, actor: Actor, workload: Workload, placements: list[dict[str, object]]
) -> None:
    runs_provisioning(actor=actor, runs=[(workload, placements)])


def runs_provisioning(
    *, actor: Actor, runs: Sequence[tuple[Workload, list[dict[str, object]]]]
) -> None:
    """Runs being brought up on their placements, in one append."""
    append_workloads(
        actor,
        [
            (
                workload,
                [
                    ev.WorkloadProvisioning(
                        allocation_id=held_allocation(workload),
                        placements=[ev.PlacementData.model_validate(p) for p in placements],
                    )
                ],
            )
            for workload, placements in runs
        ],
    )


def run_started(*, actor: Actor, workload: Workload, details: dict[str, str]) -> None:
    runs_started(actor=actor, runs=[(workload, details)])


def runs_started(*, actor: Actor, runs: Sequence[tuple[Workload, dict[str, str]]]) -> datetime:
    """Runs that are running, in one append; returns when they started."""
    now = timezone.now()
    append_workloads(
        actor,
        [
            (
                workload,
                [
                    ev.WorkloadRunning(
                        allocation_id=held_allocation(workload),
                        started_at=now,
                        details={k: str(v) for k, v in details.items()},
                    )
                ],
            )
            for workload, details in runs
        ],
    )
    return now


def run_ended(
    *,
    actor: Actor,
    workload: Workload,
    reason: str,
    message: str,
    ended_at: datetime | None = None,
) -> str:
    """Release the run's GPUs; the workload is requeued or ends as its policy says.
    ``ended_at``: when the run ended, if before now (a failed node's last heartbeat): it
    is metered to then. Returns the status it is left in."""
    return runs_ended(actor=actor, runs=[(workload, reason, message)], ended_at=ended_at)[0]


def runs_ended(
    *,
    actor: Actor,
    runs: Sequence[tuple[Workload, str, str]],
    ended_at: datetime | None = None,
) -> list[str]:
    """``run_ended`` for a batch of runs, their releases in one append; a cycle of each
    cluster and a drain check of their nodes once it commits. Returns the statuses."""
    statuses = [_after_run(workload, reason) for workload, reason, _ in runs]
    allocations = Allocation.objects.in_bulk([held_allocation(w) for w, _, _ in runs])
    append_workloads(
        actor,
        [
            (workload, [released(workload, reason, message, status, ended_at=ended_at)])
            for (workload, reason, message), status in zip(runs, statuses, strict=True)
        ],
    )
    nodes = [p["node_id"] for a in allocations.values() for p in a.placements]
    triggers.drain_check(list(dict.fromkeys(nodes)))
    for cluster_id in dict.fromkeys(w.cluster_id for w, _, _ in runs):
        triggers.cycle_wanted(cluster_id)
    ended = [w.pk for (w, _, _), s in zip(runs, statuses, strict=True) if s in FINAL_STATUSES]
    if ended:
        rows = Workload.objects.in_bulk(ended)
        for workload_id in ended:
            hooks.workload_ended.on_commit(rows[workload_id])
    return statuses


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
