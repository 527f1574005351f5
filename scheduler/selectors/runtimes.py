"""Runtimes learned from a cluster's log: the runs that ended by themselves, as the engine's
``RuntimeBook`` reads them, and each waiting or running workload's runtime from it."""

from __future__ import annotations

import uuid

from scheduler.engine.forecast import Runtime, RuntimeOf
from scheduler.engine.runtimes import RunSample, RuntimeBook
from scheduler.models import Allocation
from scheduler.snapshot import ClusterView, epoch

# A run that ended by itself tells how long such work runs; one preempted, cancelled, lost
# or stopped at its maximum runtime does not.
ENDED_BY_ITSELF = ("succeeded", "failed")
# The latest runs learned from, per cluster: the book stays the same size however long the log.
HISTORY_RUNS = 5000
# GPUs out of service (the view's faults) come back by an operator, not by a runtime.
NEVER_ENDS = Runtime(float("inf"), float("inf"), float("inf"))


def runtime_book(cluster_id: uuid.UUID) -> RuntimeBook:
    """What the cluster's latest ``HISTORY_RUNS`` runs that ended by themselves say."""
    rows = (
        Allocation.objects.filter(
            cluster_id=cluster_id,
            released_at__isnull=False,
            release_reason__in=ENDED_BY_ITSELF,
        )
        .order_by("-released_at")
        .values_list(
            "project_id",
            "granted_at",
            "released_at",
            "workload__gpus_per_node",
            "workload__gpu_milli",
            "workload__nodes",
            "workload__runtime_estimate_s",
            "workload__array_id",
        )[:HISTORY_RUNS]
    )
    return RuntimeBook(
        RunSample(
            project=str(project),
            shape=(gpus, milli, nodes),
            duration_s=max(0.0, epoch(released) - epoch(granted)),
            estimate_s=estimate,
            array=str(array) if array else None,
        )
        for project, granted, released, gpus, milli, nodes, estimate, array in rows
    )


def runtimes_of(view: ClusterView, book: RuntimeBook, now: float) -> RuntimeOf:
    """Each workload of the view (waiting or running) with its runtime by ``book``; running
    work as long as the past runs that lasted at least as long as it has run by ``now``."""
    known: dict[str, Runtime] = {}
    for workload, request in view.requests.items():
        array, limit = view.arrays_and_limits.get(workload, (None, None))
        known[workload] = book.runtime(
            request.project,
            request.shape,
            request.runtime_estimate_s,
            array=array,
            max_runtime_s=limit,
            ran_s=max(0.0, now - view.running[workload][1].started_at)
            if workload in view.running
            else 0.0,
        )
    for fault in view.faults:
        known[fault.workload] = NEVER_ENDS
    fallback = book.runtime("", (), None)
    return lambda workload: known.get(workload, fallback)
