"""The scheduling service: one cycle of one cluster, on the lease holder.

A holder keeps the cluster's state in memory (``ClusterState``): built from the tables at a
log position, then caught up by reading the log after it. A cycle catches up, runs the
engine, and appends its decisions to the cluster's schedule stream with the version it read.
If another writer moved the stream, the append conflicts, nothing is written, the state is
thrown away and rebuilt, and the cycle runs again: two schedulers can never grant one GPU.
Likewise when a workload the cycle decided on moved after the state was read (cancelled, or
its run ended): a grant never follows the end of its workload.

Who may decide is a lease (``SchedulerLease``): at most one holder per cluster until it
expires; a standby takes over then. The lease saves work; the expected version is what
keeps the log correct even when two holders overlap.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from events import store
from events.errors import StreamConflict
from events.store import Metadata, RecordedEvent
from events.types import DomainEvent
from inventory import events as fleet
from neocloud.core.transactions import row_lock, session_try_lock
from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.engine.cycle import Scheduler
from scheduler.engine.fairshare import FairShareUsage
from scheduler.engine.model import Allocation, Decisions, PendingReason
from scheduler.models import SchedulerLease, WorkloadStatus, WorkloadWait
from scheduler.models import Workload as WorkloadRow
from scheduler.selectors.forecasts import forget_forecast_inputs
from scheduler.snapshot import (
    ClusterView,
    allocation_of,
    cluster_usage,
    cluster_view,
    engine_of,
    epoch,
    placements_of,
    reason_shown,
    request_of,
    waiting_of,
)
from scheduler.standing import forget_standing, held_back
from storage import events as volumes
from storage import services as storage
from tenants import events as tenancy

logger = logging.getLogger(__name__)

WORKLOAD_TYPES = frozenset(
    {
        ev.WorkloadSubmitted.event_type,
        ev.WorkloadCancelRequested.event_type,
        ev.WorkloadCancelled.event_type,
        ev.AllocationGranted.event_type,
        ev.WorkloadPreempted.event_type,
        ev.AllocationReleased.event_type,
    }
)
# Rare changes of the fleet or of policy: the state is rebuilt from the tables.
REBUILD_TYPES = frozenset(
    {
        fleet.NodeRegistered.event_type,
        fleet.NodeRespecified.event_type,
        fleet.NodeStateChanged.event_type,
        fleet.GpuFailed.event_type,
        fleet.GpuRecovered.event_type,
        tenancy.QuotaSet.event_type,
        tenancy.QuotaCleared.event_type,
        ev.QueueConfigured.event_type,
        ev.ReservationCreated.event_type,
        ev.ReservationCancelled.event_type,
        volumes.VolumePlaced.event_type,  # work mounting the volume now goes to its node
    }
)
# What moves a workload the cycle decides on, behind the scheduler's back: its owner's cancel
# and the end of its run (both on its own stream).
MOVING_TYPES = frozenset(
    {
        ev.WorkloadCancelRequested.event_type,
        ev.WorkloadCancelled.event_type,
        ev.AllocationReleased.event_type,
    }
)
MAX_ATTEMPTS = 5


HOLDER: str | None = None  # a Celery worker's name, set when it starts


def holder_name() -> str:
    """Who this process is as a lease holder: its worker (whose processes take turns), or
    the process itself."""
    return HOLDER or f"{socket.gethostname()}:{os.getpid()}"


# --- the lease -------------------------------------------------------------------------------


def lease_acquire(cluster_id: uuid.UUID, holder: str) -> int | None:
    """Take or renew the cluster's lease; its term if ``holder`` has it now, else None."""
    now = timezone.now()
    expires = now + timedelta(seconds=settings.SCHEDULER_LEASE_S)
    with transaction.atomic():
        SchedulerLease.objects.get_or_create(
            cluster_id=cluster_id, defaults={"holder": "", "expires_at": now}
        )
        lease = row_lock(SchedulerLease.objects.all()).get(cluster_id=cluster_id)
        if lease.holder != holder and lease.expires_at > now:
            return None
        if lease.holder != holder:
            lease.term += 1
            lease.holder = holder
        lease.expires_at = expires
        lease.save()
        return lease.term


def lease_holder(cluster_id: uuid.UUID) -> str | None:
    lease = SchedulerLease.objects.filter(cluster_id=cluster_id).first()
    if lease is None or lease.expires_at <= timezone.now():
        return None
    return lease.holder


def lease_remaining_s(cluster_id: uuid.UUID) -> float:
    lease = SchedulerLease.objects.filter(cluster_id=cluster_id).first()
    if lease is None:
        return 0.0
    return max(0.0, (lease.expires_at - timezone.now()).total_seconds())


def leases_release(holder: str) -> None:
    """Give up every lease of ``holder`` (a worker shutting down): standbys need not wait."""
    SchedulerLease.objects.filter(holder=holder).update(expires_at=timezone.now())


# --- the state of a cluster ------------------------------------------------------------------


@dataclass
class ClusterState:
    """What a holder knows of its cluster, as of log ``position`` and schedule ``version``."""

    cluster_id: uuid.UUID
    term: int
    position: int
    version: int
    view: ClusterView
    engine: Scheduler
    usage: FairShareUsage  # kept from the grants and releases the state applies
    reasons: dict[str, PendingReason] = field(default_factory=dict)  # as written last
    reasons_refreshed: float = 0.0  # monotonic time of the last full write of reasons
    stale: bool = False  # something only a rebuild reads changed

    @classmethod
    def build(cls, cluster_id: uuid.UUID, term: int) -> ClusterState:
        fresh = not connection.in_atomic_block
        with transaction.atomic():
            if fresh and connection.vendor == "postgresql":
                # One snapshot for the position and every table read after it.
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            position = store.head_position()
            version = store.stream_version(ev.SCHEDULE_STREAM, str(cluster_id))
            view = cluster_view(cluster_id)
            usage = cluster_usage(
                cluster_id, settings.SCHEDULER_FAIRSHARE_HALF_LIFE_S, timezone.now()
            )
        return cls(cluster_id, term, position, version, view, engine_of(view), usage)

    def started(self, allocation: Allocation, at: float) -> None:
        self.usage.start(allocation.queue, allocation.organization, allocation.gpu_milli, at)

    def stopped(self, allocation: Allocation, at: float) -> None:
        self.usage.stop(allocation.queue, allocation.organization, allocation.gpu_milli, at)

    def catch_up(self) -> None:
        """Apply what the log recorded since ``position``."""
        head = store.head_position()
        for batch in store.iter_batches(after=self.position, types=WORKLOAD_TYPES | REBUILD_TYPES):
            for event in batch:
                self._apply(event)
            self.position = batch[-1].position
        self.position = max(self.position, head)

    def _apply(self, event: RecordedEvent) -> None:
        if event.type in REBUILD_TYPES:
            self.stale = True
            return
        data = event.data
        if event.stream_type == ev.SCHEDULE_STREAM:
            mine = event.stream_id == str(self.cluster_id)
            if mine:
                self.version = max(self.version, event.version)
        else:
            mine = str(data.get("cluster_id")) == str(self.cluster_id)
        if not mine:
            return
        view = self.view
        workload = str(data.get("workload_id") or event.stream_id)
        if event.type == ev.WorkloadSubmitted.event_type:
            request = request_of({**data, "submitted_at": event.recorded_at})
            view.requests[workload] = request
            view.waiting[workload] = False
            if request.queue not in view.policy.queues:
                self.stale = True  # a project new here: its queue joins the policy
        elif event.type in (ev.WorkloadCancelRequested.event_type, ev.WorkloadCancelled.event_type):
            view.waiting.pop(workload, None)
        elif event.type == ev.AllocationGranted.event_type:
            if workload in view.running:
                return  # our own grant, applied when it was made
            request = view.requests[workload]
            allocation = allocation_of(
                request, data["gpu_model"], data["placements"], epoch(data["granted_at"])
            )
            view.running[workload] = (uuid.UUID(data["allocation_id"]), allocation)
            view.waiting.pop(workload, None)
            self.engine.add(allocation)
            self.started(allocation, allocation.started_at)
        else:  # a release: preempted (schedule stream) or ended (workload stream)
            held = view.running.get(workload)
            if held is None or str(held[0]) != str(data["allocation_id"]):
                # Released before (the first release wins). But a run that ended while this
                # scheduler preempted it has ended for good: it must not be granted again.
                ended = event.type == ev.AllocationReleased.event_type
                if ended and held is None and data["status"] != WorkloadStatus.PENDING:
                    view.waiting.pop(workload, None)
                    view.requests.pop(workload, None)
                return
            del view.running[workload]
            self.engine.release(held[1])
            self.stopped(held[1], epoch(data.get("released_at") or event.recorded_at))
            requeued = (
                event.type == ev.WorkloadPreempted.event_type
                or data["status"] == WorkloadStatus.PENDING
            )
            if requeued:
                view.waiting[workload] = False
            else:
                view.requests.pop(workload, None)


_states: dict[uuid.UUID, ClusterState] = {}


def forget(cluster_id: uuid.UUID | None = None) -> None:
    """Drop what this process keeps (all clusters when None)."""
    forget_standing()
    forget_forecast_inputs()
    if cluster_id is None:
        _states.clear()
    else:
        _states.pop(cluster_id, None)


# --- the cycle -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CycleResult:
    holder: str | None  # who holds the lease when this process did not
    granted: int = 0
    preempted: int = 0
    waiting: int = 0

    @property
    def ran(self) -> bool:
        return self.holder is None


_locks_guard = threading.Lock()
_locks: dict[uuid.UUID, threading.Lock] = {}
LOCK_CLASS = 7001  # advisory lock class of cluster cycles (two-key space: apart from others)


class Busy(Exception):
    """Another process of this holder is in a cycle of the cluster right now."""


class WorkloadsMoved(Exception):
    """Workloads the cycle decided on moved after its state was read: its decisions stand on
    a past that is no longer so."""


@contextmanager
def _serialised(cluster_id: uuid.UUID) -> Iterator[None]:
    """One cycle of a cluster at a time: across threads here, and across the processes of a
    worker, which share its name as lease holder. Raises ``Busy`` rather than wait: the
    caller asks again after the running cycle, which may have read the log too early."""
    with _locks_guard:
        lock = _locks.setdefault(cluster_id, threading.Lock())
    with lock, session_try_lock(LOCK_CLASS, cluster_id) as taken:
        if not taken:
            raise Busy(str(cluster_id))
        yield


def cycle_run(cluster_id: uuid.UUID, holder: str | None = None) -> CycleResult:
    """One cycle of the cluster if this process holds (or can take) its lease; ``Busy`` if
    another process of the holder is in one."""
    with _serialised(cluster_id):
        return _cycle(cluster_id, holder or holder_name())


def _cycle(cluster_id: uuid.UUID, holder: str) -> CycleResult:
    term = lease_acquire(cluster_id, holder)
    if term is None:
        return CycleResult(holder=lease_holder(cluster_id) or "")
    for _attempt in range(MAX_ATTEMPTS):
        state = _states.get(cluster_id)
        if state is None or state.term != term or state.stale:
            state = _states[cluster_id] = ClusterState.build(cluster_id, term)
        state.catch_up()
        if state.stale:
            state = _states[cluster_id] = ClusterState.build(cluster_id, term)
            state.catch_up()
        try:
            return _decide(state)
        except (StreamConflict, WorkloadsMoved):
            # Another writer moved the schedule stream, or a workload decided on: our engine
            # applied decisions that were not recorded. Start again from the log.
            forget(cluster_id)
        except BaseException:
            forget(cluster_id)  # the same, for any failure to record them
            raise
    logger.warning("cluster %s: cycle gave up after %d conflicts", cluster_id, MAX_ATTEMPTS)
    return CycleResult(holder=None)


def _decide(state: ClusterState) -> CycleResult:
    view, now = state.view, timezone.now()
    began = time.perf_counter()
    pending, held = held_back(waiting_of(view))
    state.engine.fair_share(*state.usage.as_of(now.timestamp()))
    decisions = state.engine.cycle(pending, now.timestamp())
    if held:
        pending_all = {**decisions.pending, **held}
        decisions = Decisions(decisions.allocations, decisions.preemptions, pending_all)
    decided = time.perf_counter()
    changes = _decision_events(state, decisions, now)
    if changes:
        # Only the decisions share the append's transaction (and its lock on the log). Lock
        # order: the log's append lock first, then the workload rows the projections update
        # (the order every workload write keeps, ``services.workload_stream.locked_workload``).
        with transaction.atomic():
            store.take_append_lock()
            _check_unmoved(state, decisions)
            recorded = store.append(
                ev.SCHEDULE_STREAM,
                str(state.cluster_id),
                changes,
                expected_version=state.version,
                metadata=Metadata(
                    actor="system:scheduler", extra={"holder": holder_name(), "term": state.term}
                ),
            )
            state.version = recorded[-1].version
            _place_local_volumes(state, decisions)
            triggers.runs_start(
                [
                    (uuid.UUID(e.data["workload_id"]), uuid.UUID(e.data["allocation_id"]))
                    for e in recorded
                    if e.type == ev.AllocationGranted.event_type
                ]
            )
            # Preemption with notice (issue 32): the victims are told, once this commits.
            triggers.runs_notice(
                [
                    (uuid.UUID(e.data["workload_id"]), uuid.UUID(e.data["allocation_id"]))
                    for e in recorded
                    if e.type == ev.WorkloadPreempted.event_type
                ]
            )
    _applied(state, decisions, changes, now.timestamp())
    appended = time.perf_counter()
    _record_reasons(state, decisions, now)
    hooks.cycle_finished.call_all(
        state.cluster_id,
        time.perf_counter() - began,
        len(decisions.allocations),
        len(decisions.preemptions),
        len(decisions.pending),
    )
    logger.debug(
        "cycle of %s: %d waiting, %d granted, %d preempted; engine %.1f ms, append %.1f ms,"
        " reasons %.1f ms",
        state.cluster_id,
        len(pending),
        len(decisions.allocations),
        len(decisions.preemptions),
        (decided - began) * 1000,
        (appended - decided) * 1000,
        (time.perf_counter() - appended) * 1000,
    )
    return CycleResult(
        holder=None,
        granted=len(decisions.allocations),
        preempted=len(decisions.preemptions),
        waiting=len(decisions.pending),
    )


def _check_unmoved(state: ClusterState, decisions: Decisions) -> None:
    """Raise ``WorkloadsMoved`` if the log recorded, after the state's position, a cancel or a
    release of a workload the decisions admit, grant or preempt. Under the append lock: what
    is not in the log now cannot commit before the decisions do."""
    decided = {w for w, admitted in state.view.waiting.items() if not admitted}
    decided.update(a.workload for a in decisions.allocations)
    decided.update(p.victim for p in decisions.preemptions)
    for batch in store.iter_batches(after=state.position, types=MOVING_TYPES):
        moved = decided.intersection(e.stream_id for e in batch)
        if moved:
            raise WorkloadsMoved(", ".join(sorted(moved)))


def _place_local_volumes(state: ClusterState, decisions: Decisions) -> None:
    """A local volume's first run decides its node (issue 32): recorded with the grant, in
    its transaction. Only grants of work held to some nodes (``nodes_allowed``) are read."""
    bound = {
        a.workload: a.placements[0].node
        for a in decisions.allocations
        if state.view.requests[a.workload].nodes_allowed is not None
    }
    if not bound:
        return
    rows = WorkloadRow.objects.filter(id__in=list(bound)).values_list("id", "volumes")
    for workload_id, mounts in rows:
        for mount in mounts:
            storage.volume_place(
                volume_id=uuid.UUID(mount["volume"]),
                node_id=uuid.UUID(bound[str(workload_id)]),
            )


def _decision_events(state: ClusterState, decisions: Decisions, now: datetime) -> list[DomainEvent]:
    view = state.view
    changes: list[DomainEvent] = []
    for workload, admitted in sorted(view.waiting.items()):
        if not admitted:
            changes.append(ev.WorkloadAdmitted(workload_id=uuid.UUID(workload)))
    for preemption in decisions.preemptions:
        allocation_id, _ = view.running[preemption.victim]
        changes.append(
            ev.WorkloadPreempted(
                workload_id=uuid.UUID(preemption.victim),
                allocation_id=allocation_id,
                by_workload_id=uuid.UUID(preemption.for_workload),
                reason=preemption.reason,
                code=preemption.code.value,
            )
        )
    for allocation in decisions.allocations:
        request = view.requests[allocation.workload]
        changes.append(
            ev.AllocationGranted(
                allocation_id=uuid.uuid4(),
                workload_id=uuid.UUID(allocation.workload),
                organization_id=uuid.UUID(request.organization),
                project_id=uuid.UUID(request.project),
                gpu_model=allocation.gpu_model,
                placements=placements_of(view, allocation),
                granted_at=now,
            )
        )
    return changes


def _applied(
    state: ClusterState, decisions: Decisions, changes: Iterable[DomainEvent], now: float
) -> None:
    """Bring the bookkeeping around the engine (which applied its decisions) up to date."""
    view = state.view
    for workload in view.waiting:
        view.waiting[workload] = True
    for preemption in decisions.preemptions:
        state.stopped(view.running.pop(preemption.victim)[1], now)
        view.waiting[preemption.victim] = False  # pending again: admitted anew next cycle
    granted = {str(c.workload_id): c for c in changes if isinstance(c, ev.AllocationGranted)}
    for allocation in decisions.allocations:
        grant = granted[allocation.workload]
        view.running[allocation.workload] = (grant.allocation_id, allocation)
        view.waiting.pop(allocation.workload, None)
        state.started(allocation, now)


REASONS_REFRESH_S = 1.0  # changed figures of known waits are written at most this often


@transaction.atomic
def _record_reasons(state: ClusterState, decisions: Decisions, now: datetime) -> None:
    """Keep ``WorkloadWait`` to the reasons of this cycle. A cache of the last cycle, not the
    log's: written after the decisions, in its own transaction. New waits and ended ones are
    written every cycle; changed figures of known waits at most every ``REASONS_REFRESH_S``
    (thousands of waits change figures every cycle)."""
    gone = [w for w in state.reasons if w not in decisions.pending]
    if gone:
        WorkloadWait.objects.filter(workload_id__in=gone).delete()
        for workload in gone:
            del state.reasons[workload]
    refresh = time.monotonic() - state.reasons_refreshed >= REASONS_REFRESH_S
    if refresh:
        state.reasons_refreshed = time.monotonic()
    changed = [
        WorkloadWait(
            workload_id=uuid.UUID(workload),
            cluster_id=state.cluster_id,
            **reason_shown(reason, state.view.node_names),
            updated_at=now,
        )
        for workload, reason in decisions.pending.items()
        if workload not in state.reasons or (refresh and state.reasons[workload] != reason)
    ]
    if changed:
        WorkloadWait.objects.bulk_create(
            changed,
            update_conflicts=True,
            unique_fields=["workload_id"],
            update_fields=["code", "message", "figures", "updated_at"],
        )
        for row in changed:
            state.reasons[str(row.workload_id)] = decisions.pending[str(row.workload_id)]
