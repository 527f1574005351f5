"""Provisioning runs: the steps of a run, one Celery task each, their progress in the node's
stream.

``node_provision`` and ``node_decommission`` start a run (``ProvisioningStarted``: its
number, its phase, its steps) and dispatch it once they commit. From then on each task
(``inventory.tasks.provision_step``) advances the run by one step:

1. claim: under the node's row lock, read the node's stream, take the run's first step
   without a ``ProvisioningStepSucceeded``, append ``ProvisioningStepStarted`` with the
   attempt number, commit;
2. perform: call the driver with the step's idempotency key, outside any transaction (a step
   takes seconds: the node's row is not held meanwhile);
3. record: under the lock again, append ``ProvisioningStepSucceeded`` (with the node's
   ``become_ready`` after the last step of a provision run) or ``ProvisioningStepFailed``
   (``final`` when no attempt is left: the node then fails). Once that commits, the next
   step is dispatched.

Delivery is at least once: late acks bring a killed worker's message back, the reconciler
dispatches stale runs again. So every part stands repetition and concurrency: a step that
succeeded is never started again; a repeated driver call returns the first call's result
(same idempotency key, no second effect); only the task that records a step's success
dispatches the next step, so duplicate chains merge again.

Settings (read at each use, defaults in brackets): ``PROVISIONING_MAX_ATTEMPTS`` (5) attempts
per step, started attempts count even when their worker died; ``PROVISIONING_RETRY_BASE_S``
(1.0) backoff before the second attempt, doubled for each one after;
``PROVISIONING_STALE_AFTER_S`` (300) how long a run may make no progress before the
reconciler dispatches it again: more than a step's time limit plus the longest backoff.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from events import store
from events.store import Metadata
from events.types import DomainEvent
from inventory import drivers, hooks, services
from inventory import events as ev
from inventory.drivers import NodeSpec, StepFailed
from inventory.drivers.base import StepDetails, step_attempt
from inventory.lifecycle import NodeAction, NodeState, next_state
from inventory.models import Node, ProvisioningStep
from neocloud.core.redaction import redact
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants.access import Actor

PROVISION = "provision"
TEARDOWN = "teardown"
ACTOR = "provisioning"  # metadata actor system:provisioning

DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RETRY_BASE_S = 1.0
DEFAULT_STALE_AFTER_S = 300.0


def max_attempts() -> int:
    return int(getattr(settings, "PROVISIONING_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS))


def retry_backoff_s(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based): the base after the
    first, then twice as long after each further one."""
    base = float(getattr(settings, "PROVISIONING_RETRY_BASE_S", DEFAULT_RETRY_BASE_S))
    return base * float(2 ** (attempt - 1))


# --- progress, as the stream tells it ------------------------------------------------------


@dataclass(frozen=True)
class RunProgress:
    """The node's current run (its last ``ProvisioningStarted``) and what became of it."""

    run: int
    phase: str
    steps: tuple[str, ...]
    attempts: dict[str, int] = field(default_factory=dict)  # highest attempt started
    succeeded: dict[str, StepDetails] = field(default_factory=dict)
    failed: bool = False  # a final failure ended the run
    last_progress_at: datetime | None = None  # when the stream last moved

    @property
    def next_step(self) -> str | None:
        return next((step for step in self.steps if step not in self.succeeded), None)

    @property
    def finished(self) -> bool:
        return self.failed or self.next_step is None


def run_progress(node_id: UUID) -> RunProgress | None:
    """The progress of the node's current run, or None when it never had one."""
    started: ev.ProvisioningStarted | None = None
    attempts: dict[str, int] = {}
    succeeded: dict[str, StepDetails] = {}
    failed = False
    last_at = None
    for event in store.read_stream(ev.NODE_STREAM, str(node_id)):
        last_at = event.recorded_at
        data = event.data
        if event.type == ev.ProvisioningStarted.event_type:
            started, attempts, succeeded, failed = ev.ProvisioningStarted(**data), {}, {}, False
        elif started is None or data.get("run") != started.run:
            continue
        elif event.type == ev.ProvisioningStepStarted.event_type:
            attempts[data["step"]] = max(attempts.get(data["step"], 0), data["attempt"])
        elif event.type == ev.ProvisioningStepSucceeded.event_type:
            succeeded[data["step"]] = data["details"]
        elif event.type == ev.ProvisioningStepFailed.event_type:
            failed = failed or data["final"]
    if started is None:
        return None
    return RunProgress(
        run=started.run,
        phase=started.phase,
        steps=tuple(started.steps),
        attempts=attempts,
        succeeded=succeeded,
        failed=failed,
        last_progress_at=last_at,
    )


# --- one step --------------------------------------------------------------------------------


class StepStatus(enum.StrEnum):
    SUCCEEDED = "succeeded"  # recorded; the next step is dispatched (if any)
    RETRYING = "retrying"  # failed, another attempt is due in ``retry_in_s``
    FAILED = "failed"  # failed with no attempt left: the run (and a provisioned node) failed
    IDLE = "idle"  # nothing to do: run finished, superseded or abandoned, or a duplicate won


@dataclass(frozen=True)
class StepOutcome:
    status: StepStatus
    step: str | None = None
    attempt: int | None = None
    retry_in_s: float | None = None


@dataclass(frozen=True)
class StepClaim:
    """An attempt of a step, recorded as started and to be performed."""

    node: NodeSpec
    run: int
    phase: str
    step: str
    attempt: int

    @property
    def idempotency_key(self) -> str:
        return step_key(self.node.node_id, self.run, self.phase, self.step)


def step_key(node_id: UUID, run: int, phase: str, step: str) -> str:
    """The driver's idempotency key: every attempt of a step of a run shares it."""
    return f"{node_id}:{run}:{phase}:{step}"


def provisioning_step_run(*, node_id: UUID, run: int) -> StepOutcome:
    """Advance ``run`` of the node by one step (claim, perform, record: see the module).

    Call outside any transaction: each phase commits on its own and the driver call holds no
    lock. A step interrupted by the task's soft time limit counts as a retryable failure.
    """
    claimed = atomic_with_retry(_claim, node_id, run)
    if isinstance(claimed, StepOutcome):
        return claimed
    began = time.monotonic()
    outcome = _performed(claimed)
    hooks.provisioning_step_finished.call_all(
        claimed.phase, claimed.step, outcome.status, time.monotonic() - began
    )
    return outcome


def _performed(claimed: StepClaim) -> StepOutcome:
    try:
        details = _perform(claimed)
    except StepFailed as exc:
        return atomic_with_retry(_record_failure, claimed, str(exc), retryable=exc.retryable)
    except SoftTimeLimitExceeded:
        error = f"{claimed.step} did not finish within its time limit"
        return atomic_with_retry(_record_failure, claimed, error, retryable=True)
    return atomic_with_retry(_record_success, claimed, details)


def _claim(node_id: UUID, run: int) -> StepClaim | StepOutcome:
    # Not select_related: FOR UPDATE would lock the cluster's row along with the node's.
    node = row_lock(Node.objects.all()).filter(pk=node_id).first()
    if node is None:
        return StepOutcome(StepStatus.IDLE)
    progress = run_progress(node.pk)
    if progress is None or progress.run != run or not _live(node, progress):
        return StepOutcome(StepStatus.IDLE)
    step = progress.next_step
    if step is None:  # not reached: a live run is unfinished
        return StepOutcome(StepStatus.IDLE)
    attempt = progress.attempts.get(step, 0) + 1
    if attempt > max_attempts():
        # Every attempt was started and none was recorded: their workers died with them.
        _fail_run(
            node,
            progress,
            step,
            attempt - 1,
            f"{step}: {attempt - 1} attempts started, none finished",
        )
        return StepOutcome(StepStatus.FAILED, step, attempt - 1)
    key = step_key(node.pk, run, progress.phase, step)
    _append(
        node,
        [ev.ProvisioningStepStarted(run=run, phase=progress.phase, step=step, attempt=attempt)],
        key,
    )
    return StepClaim(node=_spec(node), run=run, phase=progress.phase, step=step, attempt=attempt)


def _perform(claim: StepClaim) -> StepDetails:
    """The step's details as the log may keep them: a real driver returns credentials with
    them (a root password, a private key), scrubbed here before anything records them."""
    token = step_attempt.set(claim.attempt)
    try:
        details = drivers.driver(claim.node.driver).run_step(
            claim.step, claim.node, idempotency_key=claim.idempotency_key
        )
    finally:
        step_attempt.reset(token)
    scrubbed: StepDetails = redact(details)
    return scrubbed


def _record_success(claim: StepClaim, details: StepDetails) -> StepOutcome:
    current = _locked_if_news(claim)
    if current is None:
        return StepOutcome(StepStatus.IDLE, claim.step, claim.attempt)
    node, progress = current
    changes: list[DomainEvent] = [
        ev.ProvisioningStepSucceeded(
            run=claim.run,
            phase=claim.phase,
            step=claim.step,
            attempt=claim.attempt,
            details=details,
        )
    ]
    remaining = [s for s in progress.steps if s not in progress.succeeded and s != claim.step]
    live = _live(node, progress)
    if not remaining and claim.phase == PROVISION and live:
        target = next_state(NodeState(node.state), NodeAction.BECOME_READY)
        if target is not None:
            changes.append(
                ev.NodeStateChanged(
                    action=NodeAction.BECOME_READY.value,
                    from_state=node.state,
                    to_state=target.value,
                    reason=f"provisioning run {claim.run} completed",
                )
            )
    _append(node, changes, claim.idempotency_key)
    if remaining and live:
        node_id, run = node.pk, claim.run
        transaction.on_commit(lambda: provisioning_dispatch(node_id, run=run))
    return StepOutcome(StepStatus.SUCCEEDED, claim.step, claim.attempt)


def _record_failure(claim: StepClaim, error: str, *, retryable: bool) -> StepOutcome:
    current = _locked_if_news(claim)
    if current is None:
        return StepOutcome(StepStatus.IDLE, claim.step, claim.attempt)
    node, progress = current
    if not retryable or claim.attempt >= max_attempts():
        _fail_run(node, progress, claim.step, claim.attempt, error)
        return StepOutcome(StepStatus.FAILED, claim.step, claim.attempt)
    _append(
        node,
        [
            ev.ProvisioningStepFailed(
                run=claim.run,
                phase=claim.phase,
                step=claim.step,
                attempt=claim.attempt,
                error=error,
                final=False,
            )
        ],
        claim.idempotency_key,
    )
    return StepOutcome(
        StepStatus.RETRYING, claim.step, claim.attempt, retry_in_s=retry_backoff_s(claim.attempt)
    )


def _fail_run(node: Node, progress: RunProgress, step: str, attempt: int, error: str) -> None:
    """Record the run's final failure; a node being provisioned fails with it (a teardown
    failure leaves the node decommissioned: the failed step is there for an operator)."""
    _append(
        node,
        [
            ev.ProvisioningStepFailed(
                run=progress.run,
                phase=progress.phase,
                step=step,
                attempt=attempt,
                error=error,
                final=True,
            )
        ],
        step_key(node.pk, progress.run, progress.phase, step),
    )
    if progress.phase == PROVISION and next_state(NodeState(node.state), NodeAction.FAIL):
        services.node_fail(
            actor=Actor.system_actor(ACTOR),
            node=node,
            reason=f"provisioning run {progress.run} failed at {step}: {error}"[:300],
        )


def _live(node: Node, progress: RunProgress) -> bool:
    """Whether the run still has work: unfinished and, for a provision run, the node still
    being provisioned (an operator may have failed it meanwhile: the run is abandoned)."""
    if progress.finished:
        return False
    return progress.phase != PROVISION or node.state == NodeState.PROVISIONING


def _locked_if_news(claim: StepClaim) -> tuple[Node, RunProgress] | None:
    """The node, locked, and its run's progress, if the outcome of ``claim`` is still news:
    same run, not ended, and no duplicate of the task recorded the step's success first."""
    node = row_lock(Node.objects.all()).get(pk=claim.node.node_id)
    progress = run_progress(node.pk)
    if (
        progress is None
        or progress.run != claim.run
        or progress.failed
        or claim.step in progress.succeeded
    ):
        return None
    return node, progress


def _spec(node: Node) -> NodeSpec:
    return NodeSpec(
        node_id=node.pk,
        name=node.name,
        cluster=node.cluster.slug,
        gpu_model=node.gpu_model_id,
        gpu_count=node.gpus.count(),
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        driver=node.driver,
    )


def _append(node: Node, changes: Sequence[DomainEvent], idempotency_key: str) -> None:
    """Append with the version read under the row lock (the caller holds it)."""
    store.append(
        ev.NODE_STREAM,
        str(node.pk),
        changes,
        expected_version=node.version,
        metadata=Metadata(
            actor=f"system:{ACTOR}",
            correlation_id=f"provisioning:{node.pk}",
            idempotency_key=idempotency_key,
        ),
    )
    node.refresh_from_db(fields=["version", "state"])


# --- dispatch and reconciliation ---------------------------------------------------------------


def provisioning_dispatch(node_id: UUID, *, run: int | None = None) -> None:
    """Enqueue the next step of the node's run ``run`` (default: its current run).

    Call on commit of whatever started or advanced the run. A duplicate dispatch is harmless.
    """
    if run is None:
        run = Node.objects.filter(pk=node_id).values_list("provisioning_run", flat=True).first()
        if not run:
            return
    hooks.provisioning_step_enqueue.call_all(node_id, run)


def run_started(node_id: UUID) -> None:
    """Answers ``hooks.provisioning_started``: the new run's first step. Looks the dispatch up
    when called, so that a test can lose its messages."""
    provisioning_dispatch(node_id)


def provisioning_reconcile(
    *, stale_after: timedelta | None = None, now: datetime | None = None
) -> list[UUID]:
    """Dispatch again every unfinished run that made no progress for ``stale_after``: the
    safety net for lost messages and killed workers (steps are idempotent, so a run that was
    only slow gets a harmless duplicate). Returns the nodes dispatched."""
    if stale_after is None:
        stale_after = timedelta(
            seconds=float(getattr(settings, "PROVISIONING_STALE_AFTER_S", DEFAULT_STALE_AFTER_S))
        )
    now = now or timezone.now()
    dispatched = []
    for node in _unfinished_run_candidates():
        progress = run_progress(node.pk)
        if progress is None or not _live(node, progress):
            continue
        if progress.last_progress_at is not None and now - progress.last_progress_at < stale_after:
            continue
        provisioning_dispatch(node.pk, run=progress.run)
        dispatched.append(node.pk)
    return dispatched


def _unfinished_run_candidates() -> list[Node]:
    """Nodes being provisioned, and decommissioned nodes whose teardown (by the projection)
    has neither completed nor failed; the stream decides for each."""
    teardown_over = (
        ProvisioningStep.objects.filter(
            node__state=NodeState.DECOMMISSIONED, phase=TEARDOWN, run=F("node__provisioning_run")
        )
        .values("node_id")
        .annotate(
            succeeded=Count("id", filter=Q(status="succeeded")),
            failed=Count("id", filter=Q(status="failed")),
        )
        .filter(Q(failed__gt=0) | Q(succeeded__gte=len(drivers.TEARDOWN_STEPS)))
        .values("node_id")
    )
    return list(
        Node.objects.filter(
            Q(state=NodeState.PROVISIONING)
            | (Q(state=NodeState.DECOMMISSIONED, provisioning_run__gt=0) & ~Q(pk__in=teardown_over))
        ).order_by("pk")
    )
