"""``bench estimates``: start-time estimates for 10,000 waiting workloads on 10,000 GPUs.

Pure engine, no database. The cluster of ``bench scheduler`` (1,250 nodes x 8 GPUs at scale
1), filled by one cycle of 22,000 workloads; the 10,000 first in line of those left waiting
are forecast (``scheduler.engine.forecast``: the engine run forward) with runtimes
from a ``RuntimeBook`` learned from 5,000 seeded past runs (estimates overrun or undershot by
a log-normal factor, as users' are), expecting the arrivals the service would expect from
these submissions (all within the last 2 h: ``arrivals.expected_arrivals``, at most 200).

Measured, each the best of ``ROUNDS`` (CPU seconds of this process, so the machine's other load
counts as little as it can; each after a full garbage collection):
- ``estimate_ms``: the forecast of every waiting workload, from the live state;
- ``baseline_cycle_ms``: the baseline, one scheduling cycle of the same waiting work on the
  same state (``Scheduler.cycle``, what a cycle costs anyway): ``cycles_per_estimate`` is the
  forecast's cost in cycles;
- ``round_ms``: a forecast then a cycle, back to back as the service runs them, the mean of
  ``BACK_TO_BACK`` rounds with the garbage collector left to itself, so whatever a forecast
  leaves to collect is paid within them; ``full_collections_per_round``: how many times the
  collector walked the whole heap meanwhile.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable
from typing import Any

from bench.registry import engine_build, peak_rss_mb, suite
from bench.scheduler import NOW, scenario
from scheduler.engine.arrivals import Outlook, expected_arrivals
from scheduler.engine.cycle import Scheduler
from scheduler.engine.forecast import Runtime, StartEstimate, forecast
from scheduler.engine.model import WHOLE, Decisions, Request
from scheduler.engine.runtimes import RunSample, RuntimeBook

SUBMITTED = 22_000
WAITING = 10_000
HISTORY = 5_000
ROUNDS = 2
BACK_TO_BACK = 4
SEED = 20261202


def _history(pending: list[Request], rng: random.Random) -> RuntimeBook:
    """Past runs of the same projects and shapes: an hour or so each, estimates off by a
    log-normal factor (median 2: users overestimate)."""
    samples = []
    for request in rng.sample(pending, min(HISTORY, len(pending))):
        duration = rng.lognormvariate(math.log(3600.0), 1.0)
        estimate = duration * rng.lognormvariate(math.log(2.0), 0.5)
        samples.append(
            RunSample(request.project or request.queue, request.shape, duration, estimate)
        )
    return RuntimeBook(samples)


def _cpu(work: Callable[[], Any]) -> tuple[Any, float]:
    """CPU seconds of ``work``, which starts after a full collection: neither part pays for the
    other's garbage (the forecast pauses the cyclic collector; what it leaves is collected
    after, see ``forecast``)."""
    gc.collect()
    started = time.process_time()
    result = work()
    return result, time.process_time() - started


@suite("estimates")
def bench_estimates(scale: float) -> dict[str, Any]:
    snapshot, pending, policy = scenario(scale, SUBMITTED)
    engine = Scheduler(snapshot, policy)
    decisions = engine.cycle(pending, NOW)
    state = engine.snapshot
    waiting = [r for r in pending if r.id in decisions.pending][: round(WAITING * scale)]
    book = _history(pending, random.Random(SEED))  # noqa: S311 -- reproducible, not a secret
    requests = {r.id: r for r in pending}
    known: dict[str, Runtime] = {}
    for allocation in state.allocations:
        ran = max(0.0, NOW + 1 - allocation.started_at)  # as the service passes it
        request = requests.get(allocation.workload)
        if request is not None:
            known[allocation.workload] = book.runtime(
                request.queue, request.shape, request.runtime_estimate_s, ran_s=ran
            )
        else:  # the scenario's running work: one GPU or a few, no estimate
            gpus = sum(len(p.gpus) for p in allocation.placements)
            known[allocation.workload] = book.runtime(
                allocation.queue, (gpus, WHOLE, 1), None, ran_s=ran
            )
    for request in waiting:
        known[request.id] = book.runtime(request.queue, request.shape, request.runtime_estimate_s)
    arrivals = expected_arrivals(
        pending, NOW + 1, Outlook(), min_priority=min(r.priority for r in waiting)
    )
    for arrival in arrivals:
        known[arrival.id] = book.runtime(arrival.queue, arrival.shape, arrival.runtime_estimate_s)
    runtime_of = known.__getitem__

    def estimate() -> dict[str, StartEstimate]:
        return forecast(state, waiting, policy, NOW + 1, runtime_of, arrivals=arrivals)

    def cycle() -> Decisions:
        return Scheduler(state, policy).cycle(waiting, NOW + 1)

    estimate_s = cycle_s = math.inf
    estimates: dict[str, StartEstimate] = {}
    for _ in range(ROUNDS):
        estimates, seconds = _cpu(estimate)
        estimate_s = min(estimate_s, seconds)
        _, seconds = _cpu(cycle)
        cycle_s = min(cycle_s, seconds)
    collections = gc.get_stats()[2]["collections"]
    started = time.process_time()
    for _ in range(BACK_TO_BACK):
        estimate()
        cycle()
    round_s = (time.process_time() - started) / BACK_TO_BACK
    full = (gc.get_stats()[2]["collections"] - collections) / BACK_TO_BACK
    starts = sorted(e.start - NOW for e in estimates.values() if e.start is not None)
    return {
        "gpus": sum(n.gpu_count for n in state.nodes),
        "running": len(state.allocations),
        "waiting": len(waiting),
        "expected_arrivals": len(arrivals),
        "estimate_ms": round(estimate_s * 1000, 1),
        "baseline_cycle_ms": round(cycle_s * 1000, 1),
        "cycles_per_estimate": round(estimate_s / cycle_s, 1) if cycle_s else None,
        "round_ms": round(round_s * 1000, 1),
        "full_collections_per_round": full,
        "estimated": len(starts),
        "never_or_beyond_horizon": len(waiting) - len(starts),
        "median_wait_s": round(starts[len(starts) // 2], 1) if starts else None,
        "peak_rss_mb": peak_rss_mb(),
        "engine": engine_build(),
    }
