"""Start-time estimates of a cluster's waiting work: the engine's forecast
(``engine.forecast``) run from the cluster's state as a cycle reads it (its running work, its
queue in the engine's order with fair share's usage, reservations, quota), stored as
``WorkloadEstimate`` rows for the API and the console to read.

Derived data, not events: the estimates task (``tasks.estimate_cluster``) rebuilds the rows
after cycles, at most every ``SCHEDULER_ESTIMATE_INTERVAL_S``, and nothing replays them. A
cycle never waits for it. Each refresh first settles the rows of workloads that stopped
waiting since the last: a workload granted GPUs since its first estimate is observed (how far
off its first and its latest estimates were, ``hooks.start_estimate_checked``) and its row
dropped; one cancelled or ended is dropped. Settling before the forecast keeps each row's
latest estimate the last one made before its start.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from neocloud.core.transactions import session_try_lock
from scheduler import hooks
from scheduler.engine.forecast import Horizon, StartEstimate, forecast
from scheduler.models import WAITING_STATUSES, Allocation, Workload, WorkloadEstimate
from scheduler.selectors.forecasts import forecast_inputs_kept
from scheduler.snapshot import waiting_of
from scheduler.standing import held_back

LOCK_CLASS = 7002  # advisory lock class of estimate refreshes (cycles take 7001)
HORIZON = Horizon()


@dataclass(frozen=True)
class EstimatesRefreshed:
    """What a refresh did; ``ran`` False: another was refreshing the cluster (nothing done)."""

    ran: bool
    estimated: int = 0
    observed: int = 0  # workloads that started since, their errors observed
    dropped: int = 0  # workloads that stopped waiting without starting


def workload_estimates_refresh(*, cluster_id: uuid.UUID) -> EstimatesRefreshed:
    """Settle the estimates of work that stopped waiting, then estimate the start of all that
    waits on the cluster now. One refresh of a cluster at a time (a session advisory lock):
    a second one meanwhile returns at once, doing nothing. Outside a transaction: each step
    commits its own."""
    with session_try_lock(LOCK_CLASS, cluster_id) as taken:
        if not taken:
            return EstimatesRefreshed(ran=False)
        observed, dropped = _settle(cluster_id)
        now = timezone.now()
        estimates = _forecast(cluster_id)
        _store(cluster_id, estimates, now)
    return EstimatesRefreshed(True, len(estimates), observed, dropped)


@transaction.atomic
def _settle(cluster_id: uuid.UUID) -> tuple[int, int]:
    first_grant = (
        Allocation.objects.filter(
            workload_id=OuterRef("workload_id"), granted_at__gte=OuterRef("first_computed_at")
        )
        .order_by("granted_at")
        .values("granted_at")[:1]
    )
    waits = Workload.objects.filter(
        pk=OuterRef("workload_id"), status__in=list(WAITING_STATUSES), cancel_requested=False
    )
    gone = list(
        WorkloadEstimate.objects.filter(cluster_id=cluster_id)
        .annotate(started=Subquery(first_grant), waits=Exists(waits))
        .filter(Q(started__isnull=False) | Q(waits=False))
    )
    if not gone:
        return 0, 0
    WorkloadEstimate.objects.filter(pk__in=[row.pk for row in gone]).delete()
    started = [row for row in gone if row.started is not None]
    for row in started:
        for kind, estimate in (
            ("at_submission", row.first_estimated_start),
            ("latest", row.estimated_start),
        ):
            if estimate is not None:
                error = abs((estimate - row.started).total_seconds())
                hooks.start_estimate_checked.on_commit(cluster_id, kind, error)
    return len(started), len(gone) - len(started)


def _forecast(cluster_id: uuid.UUID) -> dict[str, StartEstimate]:
    """The forecast of the cluster's waiting work as a cycle run now would see it, with
    the work its recent submissions say will come."""
    inputs = forecast_inputs_kept(cluster_id)  # the estimates and dry runs after it reuse them
    pending, _ = held_back(waiting_of(inputs.view))  # held work gets no estimate
    if not pending:
        return {}
    arrivals, runtime_of = inputs.arrivals(pending)
    return forecast(
        inputs.snapshot, pending, inputs.policy, inputs.at, runtime_of, HORIZON, arrivals
    )


def _moment(at: float | None) -> datetime | None:
    return None if at is None else datetime.fromtimestamp(at, tz=UTC)


@transaction.atomic
def _store(cluster_id: uuid.UUID, estimates: dict[str, StartEstimate], now: datetime) -> None:
    """Upsert each estimate; a new row's first estimate is this one."""
    rows = []
    for workload, estimate in estimates.items():
        start = _moment(estimate.start)
        rows.append(
            WorkloadEstimate(
                workload_id=uuid.UUID(workload),
                cluster_id=cluster_id,
                estimated_start=start,
                earliest=_moment(estimate.earliest),
                latest=_moment(estimate.latest),
                basis=[b.value for b in estimate.basis],
                computed_at=now,
                first_estimated_start=start,
                first_computed_at=now,
            )
        )
    if rows:
        WorkloadEstimate.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["workload_id"],
            update_fields=["estimated_start", "earliest", "latest", "basis", "computed_at"],
        )
