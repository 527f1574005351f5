"""What a forecast of one cluster reads: its state as a cycle run now would see it (fair-share
usage in the policy, as a cycle has it), the runtimes its log has taught, and the work its
recent submissions say will come (``engine.arrivals``).

Reading them costs most of an estimate, a dry run or an operator's what-if on a long line
(every waiting row, the runtime history, the usage): ``latest_forecast_inputs`` keeps each
cluster's latest in the process and hands them out again while no event concerning the
cluster was appended since they were read (``CONCERNING``) and they are younger than
``FORECAST_INPUTS_TTL_S`` (the usage, the runtimes of running work and the clock move with
time alone). The refresh of estimates keeps them too.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from events import store
from inventory import events as fleet
from inventory.models import Cluster, Node
from scheduler import events as ev
from scheduler.engine.arrivals import Outlook, expected_arrivals, replayed
from scheduler.engine.forecast import Runtime, RuntimeOf
from scheduler.engine.model import Policy, Request, Snapshot
from scheduler.engine.runtimes import RuntimeBook
from scheduler.models import Workload
from scheduler.selectors.runtimes import runtime_book, runtimes_of
from scheduler.snapshot import (
    ClusterView,
    cluster_usage,
    cluster_view,
    epoch,
    request_of,
    snapshot_of,
)
from tenants import events as tenancy


@dataclass(frozen=True)
class ForecastInputs:
    view: ClusterView
    snapshot: Snapshot
    policy: Policy
    runtime_of: RuntimeOf  # of the work in the view
    book: RuntimeBook  # for work not in it yet
    at: float  # now, as the forecast counts
    # The submissions of the outlook's window (their runtimes by ``book``), since when the
    # cluster could take any, and the outlook (None: no work is expected).
    submitted: dict[str, tuple[Request, Runtime]]
    known_since: float
    outlook: Outlook | None

    def arrivals(self, pending: Sequence[Request]) -> tuple[list[Request], RuntimeOf]:
        """The work expected after now, as the recent past repeats (none of a priority below
        all of ``pending``: it would queue behind all of it), and ``runtime_of`` for it too."""
        if self.outlook is None or not pending or not self.submitted:
            return [], self.runtime_of
        arrivals = expected_arrivals(
            (request for request, _ in self.submitted.values()),
            self.at,
            self.outlook,
            known_since=self.known_since,
            min_priority=min(r.priority for r in pending),
        )
        # Each replay runs as the submission it replays.
        runtimes = {a.id: self.submitted[replayed(a.id)][1] for a in arrivals}
        base = self.runtime_of
        return arrivals, lambda workload: runtimes.get(workload) or base(workload)


# What concerns every cluster's inputs: changes of quotas and queues (an organization's or a
# project's, wherever its work is) and a reservation's end (its event names no cluster).
# Everything else that changes a cluster's inputs is on its schedule stream (grants,
# preemptions, admissions), names the cluster (submissions, cancels, releases, reservations,
# a node registered) or is on the stream of one of its nodes (a node's state, spec, GPUs).
EVERY_CLUSTER_TYPES = frozenset(
    {
        tenancy.QuotaSet.event_type,
        tenancy.QuotaCleared.event_type,
        ev.QueueConfigured.event_type,
        ev.ReservationCancelled.event_type,
    }
)


@dataclass(frozen=True)
class _Kept:
    position: int  # the log's head when they were read (or last found unconcerned)
    read_at: float  # monotonic
    nodes: frozenset[str]  # the cluster's nodes, in service or not, when they were read
    inputs: ForecastInputs


# Each cluster's latest inputs in this process.
_latest: dict[uuid.UUID, _Kept] = {}
_latest_guard = threading.Lock()


def latest_forecast_inputs(cluster_id: uuid.UUID) -> ForecastInputs:
    """The cluster's inputs as of now: the latest read in this process if they are younger
    than ``FORECAST_INPUTS_TTL_S`` and no event concerning the cluster was appended since,
    else read anew (and kept). Events of other clusters leave them be: on a busy log, one
    cluster's estimates still reuse them. The head is read before the tables, so inputs that
    saw a later event than it are only read again once more, never kept past one they
    missed."""
    clock = time.monotonic()
    with _latest_guard:
        kept = _latest.get(cluster_id)
    if kept is not None and clock - kept.read_at < settings.FORECAST_INPUTS_TTL_S:
        cluster = str(cluster_id)
        head, touched = store.touched_since(
            kept.position,
            streams={ev.SCHEDULE_STREAM: [cluster], fleet.NODE_STREAM: kept.nodes},
            carrying=("cluster_id", cluster),
            types=EVERY_CLUSTER_TYPES,
        )
        if not touched:
            # Still the cluster's state at ``head``: the next check starts there.
            with _latest_guard:
                if _latest.get(cluster_id) is kept:
                    _latest[cluster_id] = replace(kept, position=head)
            return kept.inputs
    return forecast_inputs_kept(cluster_id)


def forget_forecast_inputs() -> None:
    """Drop every cluster's kept inputs (a test that changed tables behind the log)."""
    with _latest_guard:
        _latest.clear()


def forecast_inputs_kept(cluster_id: uuid.UUID) -> ForecastInputs:
    """The cluster's inputs read now, kept as its latest."""
    position, clock = store.head_position(), time.monotonic()
    nodes = frozenset(
        str(pk) for pk in Node.objects.filter(cluster_id=cluster_id).values_list("pk", flat=True)
    )
    inputs = forecast_inputs(cluster_id, timezone.now())
    with _latest_guard:
        _latest[cluster_id] = _Kept(position, clock, nodes, inputs)
    return inputs


def forecast_inputs(cluster_id: uuid.UUID, now: datetime) -> ForecastInputs:
    view = cluster_view(cluster_id)
    usage = cluster_usage(cluster_id, settings.SCHEDULER_FAIRSHARE_HALF_LIFE_S, now)
    queues, organizations = usage.as_of(now.timestamp())
    book = runtime_book(cluster_id)
    window = settings.SCHEDULER_ESTIMATE_ARRIVALS_WINDOW_S
    outlook = Outlook(window_s=window, look_ahead_s=2 * window) if window > 0 else None
    return ForecastInputs(
        view=view,
        snapshot=snapshot_of(view),
        policy=replace(view.policy, usage_history=queues, organization_usage=organizations),
        runtime_of=runtimes_of(view, book, now.timestamp()),
        book=book,
        at=now.timestamp(),
        submitted=_submitted(cluster_id, book, now, outlook),
        known_since=epoch(Cluster.objects.values_list("created_at", flat=True).get(pk=cluster_id)),
        outlook=outlook,
    )


def _submitted(
    cluster_id: uuid.UUID, book: RuntimeBook, now: datetime, outlook: Outlook | None
) -> dict[str, tuple[Request, Runtime]]:
    """The cluster's submissions within the outlook's window (whatever became of them: work
    that started at once is expected again as much as work that waited), with their runtimes
    as ``book`` has them."""
    if outlook is None:
        return {}
    rows = Workload.objects.filter(
        cluster_id=cluster_id,
        submitted_at__gt=now - timedelta(seconds=outlook.window_s),
        submitted_at__lte=now,
    ).order_by("submitted_at")[: 10 * outlook.max_arrivals]
    submitted = {}
    for row in rows.values():
        request = request_of(row)
        array = row["array_id"]
        runtime = book.runtime(
            request.project,
            request.shape,
            request.runtime_estimate_s,
            array=str(array) if array else None,
            max_runtime_s=row["max_runtime_s"],
        )
        submitted[request.id] = (request, runtime)
    return submitted
