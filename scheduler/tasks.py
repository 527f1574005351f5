"""Scheduling tasks: cycles of a cluster, and the steps of runs.

Cycles are asked for on commit of the writes that matter (``triggers``) and by beat's tick.
Asks within ``SCHEDULER_DEBOUNCE_S`` make one task (a Redis key); the task clears the key
before it reads the log, so an ask that comes during a cycle gets a cycle of its own.

A worker that receives a cycle of a cluster whose lease another worker holds sends it on to
that worker's own queue (``scheduler.<worker name>``, which every worker consumes besides
the shared ones): the holder keeps the cluster's state in memory, the others would rebuild it.

Without ``REDIS_URL`` (the embedded default) tasks run in the calling process: a cycle runs
right after the commit that asked for it, and runs are checked by the tick instead of by
delayed tasks (eager tasks cannot wait).

Start-time estimates (``estimate_cluster``) are asked for after a cluster's cycle, at most once
per ``SCHEDULER_ESTIMATE_INTERVAL_S`` (a cache key, in Redis: one ask for all processes); in
process, by the tick after its cycles (a request that set off a cycle must not wait for a
forecast); and by beat every ``SCHEDULER_ESTIMATES_REFRESH_S`` (``estimates_refresh``), cycles
or none, since time alone moves them. ``SCHEDULER_ESTIMATE_QUEUE`` sends them to a queue of
their own, for workers that do nothing else (a forecast then never holds a process that a
run's step or a cycle needs).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import redis
from celery import shared_task
from celery.signals import celeryd_after_setup, worker_shutting_down
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from inventory.models import Cluster
from neocloud.celery import app
from neocloud.core.transactions import RACES
from scheduler import runs, scheduling, services, triggers

DEBOUNCE_KEY = "neocloud:{database}:scheduler:cycle-asked:{cluster}"
ESTIMATES_KEY = "neocloud:{database}:scheduler:estimates-asked:{cluster}"
_redis: redis.Redis | None = None


def _broker() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(settings.REDIS_URL)
    return _redis


def _eager() -> bool:
    return bool(app.conf.task_always_eager)


@celeryd_after_setup.connect
def _worker_identity(sender: str, instance: Any, **kwargs: Any) -> None:
    """A worker holds leases under its name and takes the cycles sent to it by name."""
    scheduling.HOLDER = sender
    instance.app.amqp.queues.select_add(f"scheduler.{sender}")


@worker_shutting_down.connect
def _hand_over(**kwargs: Any) -> None:
    if scheduling.HOLDER:
        scheduling.leases_release(scheduling.HOLDER)


def _asked(cluster_id: uuid.UUID) -> str:
    """The key that says a cycle is on its way (per database: suites may share a Redis)."""
    return DEBOUNCE_KEY.format(database=settings.DATABASES["default"]["NAME"], cluster=cluster_id)


def cycle_dispatch(cluster_id: uuid.UUID) -> None:
    if _eager():
        scheduling.cycle_run(cluster_id)
        return
    debounce = settings.SCHEDULER_DEBOUNCE_S
    if _broker().set(_asked(cluster_id), 1, nx=True, px=int(debounce * 1000) + 1000):
        # Straight to the holder's own queue, where cycles do not wait behind runs.
        holder = scheduling.lease_holder(cluster_id)
        route: dict[str, Any] = {"queue": f"scheduler.{holder}"} if holder else {}
        schedule_cluster.apply_async((str(cluster_id),), countdown=debounce, **route)


@shared_task(name="scheduler.schedule_cluster", acks_late=True, ignore_result=True)
def schedule_cluster(cluster_id: str, forwarded: bool = False) -> int:
    """One cycle of the cluster; returns how many workloads it granted. A cycle of a cluster
    another worker holds goes to that worker, and once more to whoever has the lease when it
    expires: if the holder died, that is the standby, which takes over then."""
    cluster = uuid.UUID(cluster_id)
    if not _eager():
        _broker().delete(_asked(cluster))
    try:
        result = scheduling.cycle_run(cluster)
    except scheduling.Busy:
        cycle_dispatch(cluster)  # another process of this worker is in a cycle: one after it
        return 0
    if result.ran:
        estimates_dispatch(cluster)
    if not result.ran and result.holder and not forwarded:
        schedule_cluster.apply_async((cluster_id, True), queue=f"scheduler.{result.holder}")
        schedule_cluster.apply_async(
            (cluster_id, True), countdown=scheduling.lease_remaining_s(cluster) + 0.1
        )
    return result.granted


def estimates_dispatch(cluster_id: uuid.UUID) -> None:
    """Estimates of the cluster now, unless they were asked for within the interval."""
    database = settings.DATABASES["default"]["NAME"]
    key = ESTIMATES_KEY.format(database=database, cluster=cluster_id)
    if cache.add(key, 1, timeout=settings.SCHEDULER_ESTIMATE_INTERVAL_S):
        queue = settings.SCHEDULER_ESTIMATE_QUEUE
        route: dict[str, Any] = {"queue": queue} if queue else {}
        estimate_cluster.apply_async((str(cluster_id),), **route)


@shared_task(name="scheduler.estimate_cluster", ignore_result=True)
def estimate_cluster(cluster_id: str) -> bool:
    """Refresh the start-time estimates of the cluster's waiting work; False if another
    refresh of it was under way (this one did nothing)."""
    refreshed = services.workload_estimates_refresh(cluster_id=uuid.UUID(cluster_id))
    return refreshed.ran


@shared_task(name="scheduler.estimates_refresh", ignore_result=True)
def estimates_refresh() -> None:
    """Beat's schedule: every cluster's estimates refreshed, even where no cycle runs (work
    ahead that runs longer than expected moves the work behind it out)."""
    queue = settings.SCHEDULER_ESTIMATE_QUEUE
    route: dict[str, Any] = {"queue": queue} if queue else {}
    for cluster_id in Cluster.objects.values_list("id", flat=True):
        estimate_cluster.apply_async((str(cluster_id),), **route)


RUNS_PER_TASK = 8  # grants of a cycle go out in tasks of this many: fewer commits, still spread


def runs_start_dispatch(grants: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    pairs = [(str(w), str(a)) for w, a in grants]
    for i in range(0, len(pairs), RUNS_PER_TASK):
        runs_start.delay(pairs[i : i + RUNS_PER_TASK])


def run_stop_dispatch(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> None:
    run_stop.delay(str(workload_id), str(allocation_id))


def _pairs(raw: Sequence[Sequence[str]]) -> list[runs.Pair]:
    return [(uuid.UUID(w), uuid.UUID(a)) for w, a in raw]


def _follow_up(outcome: dict[runs.Pair, runs.Next]) -> None:
    """Starts to try again, and checks when the earliest run is due (in process, the tick
    checks instead: eager tasks cannot wait)."""
    again = [(str(w), str(a)) for (w, a), n in outcome.items() if n.start_again]
    if again:
        runs_start.apply_async((again,), countdown=1)
    due = {(str(w), str(a)): n.check_in_s for (w, a), n in outcome.items()}
    waiting = {pair: s for pair, s in due.items() if s is not None}
    if waiting and not _eager():
        runs_check.apply_async((list(waiting),), countdown=min(waiting.values()))


# Runs' tasks: redelivered if a worker dies, and run again when they lose a race with another
# transaction (a deadlock or a stream conflict that outlasted atomic_with_retry).
RUN_TASK: dict[str, Any] = {
    "acks_late": True,
    "ignore_result": True,
    "autoretry_for": RACES,
    "retry_backoff": True,
    "max_retries": 5,
}


@shared_task(name="scheduler.runs_start", **RUN_TASK)
def runs_start(pairs: Sequence[Sequence[str]]) -> None:
    """Start a batch of granted runs."""
    _follow_up(runs.runs_start(_pairs(pairs)))


@shared_task(name="scheduler.runs_check", **RUN_TASK)
def runs_check(pairs: Sequence[Sequence[str]]) -> None:
    """End the runs of a batch that ended; look again at the others when they are due."""
    _follow_up(runs.runs_check(_pairs(pairs)))


@shared_task(name="scheduler.run_stop", acks_late=True, ignore_result=True)
def run_stop(workload_id: str, allocation_id: str) -> None:
    runs.run_stop(uuid.UUID(workload_id), uuid.UUID(allocation_id))


# --- Preemption with notice (issue 32) ---
def runs_notice_dispatch(preempted: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    runs_notice.delay([(str(w), str(a)) for w, a in preempted])


@shared_task(name="scheduler.runs_notice", **RUN_TASK)
def runs_notice(pairs: Sequence[Sequence[str]]) -> None:
    """Record the notice of preempted runs (their agents derive it from the release)."""
    runs.runs_notice_preempted(_pairs(pairs))


@shared_task(name="scheduler.tick", ignore_result=True)
def tick() -> None:
    """Time moves policies (aging, reservation windows) and runs (their ends): a cycle of
    every cluster, and runs started again or checked where nobody else will; once per
    ``FRAGMENTATION_SAMPLE_S``, the fleet's fragmentation sampled for the operators; in
    process, the start-time estimates after all that."""
    to_start, overdue = runs.runs_reconcile()
    if to_start:
        runs_start.delay([(str(w), str(a)) for w, a in to_start])
    if overdue:
        runs.runs_check(overdue)
    clusters = list(Cluster.objects.values_list("id", flat=True))
    if _eager():
        triggers.cycle_request_all()
    else:
        # Past the debounce and the holder's queue: if the holder died, whoever takes this
        # cycle forwards it and takes the lease over when it expires.
        for cluster_id in clusters:
            schedule_cluster.delay(str(cluster_id))
    with transaction.atomic():
        services.fragmentation_sample(now=timezone.now())
    if _eager():  # last: derived data, the rest of the tick does not wait for it
        for cluster_id in clusters:
            estimates_dispatch(cluster_id)
