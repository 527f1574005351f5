"""Runs: an allocation brought up on its nodes through the provisioning driver, watched, and
ended. Orchestration, not scheduling: the scheduler granted the GPUs; this starts the work
on them and gives them back when it ends.

Every function may run twice for one allocation (a worker killed mid-way, a message
delivered again): each checks that the workload still holds the allocation and what state
the run is in, and the driver's calls carry idempotency keys.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from inventory.drivers import RunOutcome, StepFailed, WorkloadRun, driver
from inventory.models import Node
from neocloud.core.redaction import redact
from neocloud.core.transactions import atomic_with_retry
from scheduler import services
from scheduler.models import FINAL_STATUSES, Allocation, Workload, WorkloadStatus
from scheduler.specs import MAX_RUNTIME_S
from tenants.access import Actor

logger = logging.getLogger(__name__)

ACTOR = Actor.system_actor("runs")


Pair = tuple[uuid.UUID, uuid.UUID]  # (workload, allocation)


@dataclass(frozen=True)
class Next:
    """What the caller should do next: look again in ``check_in_s`` seconds (None: nothing),
    or try the start again (the driver failed in a way worth retrying)."""

    check_in_s: float | None = None
    start_again: bool = False


def _run_of(workload: Workload, allocation: Allocation, driver_name: str) -> WorkloadRun:
    node_ids = _node_ids(allocation)
    return WorkloadRun(
        allocation_id=allocation.pk,
        workload_id=workload.pk,
        kind=workload.kind,
        node_ids=node_ids,
        gpu_milli=allocation.gpu_milli,
        runtime_s=workload.runtime_estimate_s,
        driver=driver_name,
    )


def _node_ids(allocation: Allocation) -> tuple[uuid.UUID, ...]:
    return tuple(uuid.UUID(str(p["node_id"])) for p in allocation.placements)


def _drivers_of(allocations: Iterable[Allocation]) -> dict[uuid.UUID, str]:
    """Each allocation's driver, in one query. A run is brought up by one driver: its first
    node's (a fleet gives the nodes of one GPU model in a cluster one driver, so that a gang
    does not straddle two)."""
    first = {a.pk: ids[0] for a in allocations if (ids := _node_ids(a))}
    drivers = dict(Node.objects.filter(pk__in=set(first.values())).values_list("pk", "driver"))
    return {a: drivers.get(node) or "" for a, node in first.items()}


def _runs_of(pairs: Iterable[tuple[Workload, Allocation]]) -> list[WorkloadRun]:
    pairs = list(pairs)
    drivers = _drivers_of(a for _, a in pairs)
    return [_run_of(w, a, drivers.get(a.pk, "")) for w, a in pairs]


def runs_start(pairs: Sequence[Pair]) -> dict[Pair, Next]:
    """Provision runs and mark them running. The runs of a batch share their transactions
    (one before the driver's calls, one after), so a cycle's grants cost a few commits."""
    pairs = list(dict.fromkeys(pairs))  # a run asked twice in a batch is started once
    outcome, to_start = atomic_with_retry(_starts_claim, pairs)
    started: list[tuple[Pair, dict[str, str]]] = []
    refused: list[tuple[Pair, str]] = []
    for pair, run in to_start:
        try:
            details = driver(run.driver).workload_start(run, idempotency_key=f"{pair[1]}:start")
            # Recorded in the workload's stream, which its tenant reads: no credentials.
            started.append((pair, redact(details)))
        except StepFailed as failure:
            if failure.retryable:
                outcome[pair] = Next(start_again=True)
            else:
                refused.append((pair, str(failure)))
    outcome.update(atomic_with_retry(_starts_record, started, refused))
    return outcome


def _starts_claim(
    pairs: Sequence[Pair],
) -> tuple[dict[Pair, Next], list[tuple[Pair, WorkloadRun]]]:
    """The runs of the batch still to start, marked provisioning (in one append); what to do
    with the rest."""
    outcome: dict[Pair, Next] = {}
    holders = services.run_holders(pairs)
    allocations = Allocation.objects.in_bulk([a for _, a in pairs])
    starting: list[tuple[Pair, Workload]] = []
    for pair in pairs:
        workload = holders.get(pair)
        if workload is None:
            outcome[pair] = Next()  # released meanwhile
        elif workload.cancel_requested:
            services.run_ended(actor=ACTOR, workload=workload, reason="cancelled", message="")
            outcome[pair] = Next()
        elif workload.status in FINAL_STATUSES:
            services.run_discarded(actor=ACTOR, workload=workload)
            outcome[pair] = Next()
        elif workload.status == WorkloadStatus.RUNNING:
            outcome[pair] = _next_check(workload)  # started before this delivery
        else:
            starting.append((pair, workload))
    services.runs_provisioning(
        actor=ACTOR,
        runs=[
            (w, list(allocations[pair[1]].placements))
            for pair, w in starting
            if w.status == WorkloadStatus.SCHEDULED
        ],
    )
    runs = _runs_of((w, allocations[pair[1]]) for pair, w in starting)
    return outcome, [(pair, run) for (pair, _), run in zip(starting, runs, strict=True)]


def _starts_record(
    started: Sequence[tuple[Pair, dict[str, str]]], refused: Sequence[tuple[Pair, str]]
) -> dict[Pair, Next]:
    outcome: dict[Pair, Next] = {}
    holders = services.run_holders([pair for pair, _ in started])
    now_running: dict[Pair, tuple[Workload, dict[str, str]]] = {}
    for pair, details in started:
        workload = holders.get(pair)
        if workload is None:
            outcome[pair] = Next()
        elif workload.status != WorkloadStatus.RUNNING:
            now_running[pair] = (workload, details)
        else:
            outcome[pair] = _next_check(workload)
    if now_running:
        started_at = services.runs_started(actor=ACTOR, runs=list(now_running.values()))
        for pair, (workload, _) in now_running.items():
            workload.status, workload.started_at = WorkloadStatus.RUNNING, started_at
            outcome[pair] = _next_check(workload)
    _ends_record([(pair, "failed", message) for pair, message in refused])
    outcome.update({pair: Next() for pair, _ in refused})
    return outcome


def runs_check(pairs: Sequence[Pair]) -> dict[Pair, Next]:
    """Ask the driver how runs go; end those that ended or overran their maximum (together,
    in one transaction)."""
    pairs = list(dict.fromkeys(pairs))
    outcome: dict[Pair, Next] = {}
    ending: list[tuple[Pair, str, str]] = []
    now = timezone.now()
    workloads = Workload.objects.in_bulk([w for w, _ in pairs])
    checked: list[tuple[Pair, Workload]] = []
    for pair in pairs:
        workload = workloads.get(pair[0])
        if (
            workload is None
            or str(workload.allocation_id) != str(pair[1])
            or workload.status != WorkloadStatus.RUNNING
            or workload.started_at is None
        ):
            outcome[pair] = Next()
        else:
            checked.append((pair, workload))
    allocations = Allocation.objects.in_bulk([a for (_, a), _ in checked])
    runs = _runs_of((w, allocations[pair[1]]) for pair, w in checked)
    for (pair, workload), run in zip(checked, runs, strict=True):
        assert workload.started_at is not None  # noqa: S101 (checked above)
        state = driver(run.driver).workload_poll(
            run,
            started_at=workload.started_at.timestamp(),
            now=now.timestamp(),
        )
        if state.outcome is RunOutcome.FAILED and _noticed_max_runtime(*pair):
            # It stopped on its notice (issue 32): it ended for its maximum, not a failure.
            ending.append((pair, "max_runtime", f"stopped on notice: {state.message}"))
        elif state.outcome is not RunOutcome.RUNNING:
            ending.append((pair, state.outcome.value, state.message))
        elif workload.max_runtime_s is not None and now >= workload.started_at + _span(
            workload.max_runtime_s
        ):
            run_stop(*pair)
            ending.append(
                (
                    pair,
                    "max_runtime",
                    f"stopped after its maximum runtime of {workload.max_runtime_s:g} s",
                )
            )
        else:
            _notice_if_due(workload, pair[1], now)
            outcome[pair] = _next_check(workload)
    outcome.update(atomic_with_retry(_ends_record, ending))
    return outcome


# --- Preemption with notice (issue 32) ---


def _notice_if_due(workload: Workload, allocation_id: uuid.UUID, now: datetime) -> None:
    """A run whose maximum runtime ends within the notice is told now, so that it ends on
    time with its checkpoint saved."""
    if workload.max_runtime_s is None or workload.started_at is None:
        return
    deadline = workload.started_at + _span(workload.max_runtime_s)
    if now >= deadline - timedelta(seconds=services.notice_s()):
        atomic_with_retry(
            services.run_notice_give,
            actor=ACTOR,
            workload_id=workload.pk,
            allocation_id=allocation_id,
            reason="max_runtime",
            deadline=deadline,
        )


def _noticed_max_runtime(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> bool:
    notice = services.run_notice_of(workload_id, allocation_id)
    return notice is not None and notice.get("reason") == "max_runtime"


def runs_notice_preempted(pairs: Sequence[Pair]) -> None:
    """Record the notice of preempted runs: they are killed ``notice_s`` after the
    preemption released their GPUs (what their agents are told, from the release)."""
    allocations = Allocation.objects.in_bulk([a for _, a in pairs])
    for workload_id, allocation_id in pairs:
        allocation = allocations.get(allocation_id)
        if allocation is None or allocation.released_at is None:
            continue
        if allocation.release_reason != "preempted":
            continue  # its run ended before the preemption did: nothing to tell
        atomic_with_retry(
            services.run_notice_give,
            actor=ACTOR,
            workload_id=workload_id,
            allocation_id=allocation_id,
            reason="preempted",
            deadline=allocation.released_at + timedelta(seconds=services.notice_s()),
        )


def _ends_record(ending: Sequence[tuple[Pair, str, str]]) -> dict[Pair, Next]:
    """End the runs (in the caller's transaction), their releases in one append."""
    if not ending:
        return {}
    holders = services.run_holders([pair for pair, _, _ in ending])
    # A run ends once, even if asked twice in the batch.
    ends = {
        pair: (holders[pair], reason, message)
        for pair, reason, message in ending
        if pair in holders
    }
    if ends:
        services.runs_ended(actor=ACTOR, runs=list(ends.values()))
    return {pair: Next() for pair, _, _ in ending}


def run_stop(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> None:
    """Stop the work on the nodes (after a cancel, or an overrun)."""
    workload = Workload.objects.filter(pk=workload_id).first()
    allocation = Allocation.objects.filter(pk=allocation_id).first()
    if workload is None or allocation is None:
        return
    (run,) = _runs_of([(workload, allocation)])
    driver(run.driver).workload_stop(run, idempotency_key=f"{allocation_id}:stop")


def _next_check(workload: Workload) -> Next:
    """When the run may next have changed: its runtime's end or its maximum, whichever is
    first (a service without a maximum is only looked at by the reconciler)."""
    if workload.started_at is None:
        return Next()
    ends = [s for s in (workload.runtime_estimate_s, workload.max_runtime_s) if s is not None]
    if not ends:
        return Next()
    now = timezone.now()
    due = workload.started_at + _span(min(ends))
    if workload.max_runtime_s is not None:
        # Its notice is due before its maximum (issue 32): looked at then, if still ahead.
        notice = workload.started_at + _span(workload.max_runtime_s - services.notice_s())
        if now < notice < due:
            due = notice
    return Next(check_in_s=max(0.0, (due - now).total_seconds()))


def _span(seconds: float) -> timedelta:
    """``seconds`` as a timedelta, capped at the longest runtime a request may ask for: a
    runtime stored before that bound (or by a path that skipped it) must not overflow."""
    return timedelta(seconds=min(seconds, MAX_RUNTIME_S))


def runs_reconcile() -> tuple[list[tuple[uuid.UUID, uuid.UUID]], list[tuple[uuid.UUID, uuid.UUID]]]:
    """Runs to start again (granted or provisioning for too long: their worker died) and
    running ones past their due check (its delayed task was lost, or there is none in
    process), as (workload, allocation) pairs."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.SCHEDULER_RUN_STALE_AFTER_S)
    current = Allocation.objects.filter(released_at__isnull=True, workload__allocation_id=F("id"))
    to_start = current.filter(
        granted_at__lt=stale,
        workload__status__in=[WorkloadStatus.SCHEDULED, WorkloadStatus.PROVISIONING],
    ).values_list("workload_id", "id")
    running = Workload.objects.filter(status=WorkloadStatus.RUNNING, allocation_id__isnull=False)
    overdue = [
        (w.pk, w.allocation_id)
        for w in running
        if w.allocation_id is not None
        and (check := _next_check(w).check_in_s) is not None
        and check <= 0
    ]
    return list(to_start), overdue


def node_failed(node: Node, reason: str) -> int:
    """Release every allocation on a failed node; its workloads are requeued or failed by
    their policy. Runs inside the transaction that failed the node. Its runs ended, for
    usage, at its last heartbeat: nothing since says they ran (a node never heard from has
    none, and is metered to the release)."""
    ended = 0
    live = Allocation.objects.filter(cluster_id=node.cluster_id, released_at__isnull=True)
    for allocation in live:
        if not any(str(p["node_id"]) == str(node.pk) for p in allocation.placements):
            continue
        workload = services.run_holder(allocation.workload_id, allocation.pk)
        if workload is not None:
            services.run_ended(
                actor=ACTOR,
                workload=workload,
                reason="node_failure",
                message=f"node {node.name} failed: {reason}"[:300],
                ended_at=node.last_heartbeat_at,
            )
            ended += 1
    return ended


def node_has_allocations(node: Node) -> bool:
    live = Allocation.objects.filter(cluster_id=node.cluster_id, released_at__isnull=True)
    return any(
        str(p["node_id"]) == str(node.pk) for a in live.only("placements") for p in a.placements
    )
