"""``bench kueue-engine``: the workloads of ``bench e2e`` (Kueue's scheduler performance
configuration) through the stateful engine alone, in a discrete-event loop, without the
database, the broker or HTTP; ``bench e2e`` reports the same figures beside its real run.

Every workload arrives at 0 and runs its runtime. A cycle runs at 0 and after every batch of
completions, ordered by the fair share of the usage so far (``FairShareUsage`` with the
service's half-life), and its decisions are applied as the service applies them
(``scheduling._applied``): grants start; a preempted workload's GPUs are given back at once
(the engine gave them back in its cycle) and the workload is pending again, to be admitted anew
and run its whole runtime again. The GPU-seconds a victim held until it was preempted count as
held (``engine_usage_pct``, as the real run's allocation rows do) and, besides, as
``engine_preempted_gpu_s``: work thrown away.

Besides makespan and usage, where the idle GPU-seconds go: per class, the free GPU-seconds its
waiting work could have used, by the reason the engine gave it (``reasons``); the reasons per
class summed over cycles; preemptions; the mean free GPUs in each tenth of the makespan.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from bench.registry import peak_rss_mb, suite
from scheduler.engine.cycle import Scheduler
from scheduler.engine.fairshare import FairShareUsage
from scheduler.engine.model import (
    WHOLE,
    Allocation,
    Node,
    PendingReason,
    Policy,
    QueueConfig,
    Request,
    Snapshot,
)

# Kueue's scheduler performance configuration, as `bench e2e` seeds it.
COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL_GPUS = 20
BORROWING_LIMIT = 100
NODES = 75
GPUS_PER_NODE = 8
# class: (count per queue at scale 1, GPUs per node, nodes, runtime s, priority)
CLASSES = {
    "small": (350, 1, 1, 0.2, 50),
    "medium": (100, 5, 1, 0.5, 100),
    "large": (50, 4, 5, 1.0, 200),
}
MODEL = "h100"


def fleet() -> tuple[tuple[Node, ...], Policy]:
    """The nodes and the policy ``bench e2e`` seeds, as ``snapshot.cluster_view`` reads them."""
    nodes = tuple(
        Node(
            name=f"b{n:03d}",
            gpu_model=MODEL,
            gpu_domains=(0,) * GPUS_PER_NODE,
            cpu_milli=128_000,
            memory_mib=1_048_576,
        )
        for n in range(NODES)
    )
    queues = {
        f"q{c}-{q}": QueueConfig(
            name=f"q{c}-{q}",
            cohort=f"cohort-{c}",
            nominal={MODEL: NOMINAL_GPUS},
            borrowing_limit=BORROWING_LIMIT,
            organization=f"c{c}",
        )
        for c in range(COHORTS)
        for q in range(QUEUES_PER_COHORT)
    }
    return nodes, Policy(queues=queues, aging_step_s=settings.SCHEDULER_AGING_STEP_S)


def workloads(scale: float) -> list[Request]:
    """The workloads of ``bench e2e`` at ``scale`` (``_plan``'s counts), all arriving at 0: the
    order of the list does not matter to a cycle."""
    requests = []
    for c in range(COHORTS):
        for q in range(QUEUES_PER_COHORT):
            queue = f"q{c}-{q}"
            for kind, (count, gpus, nodes, runtime, priority) in CLASSES.items():
                for i in range(max(1, round(count * scale))):
                    requests.append(
                        Request(
                            id=f"{queue}/{kind}-{i}",
                            queue=queue,
                            gpus_per_node=gpus,
                            nodes=nodes,
                            gpu_models=(MODEL,),
                            priority=priority,
                            runtime_estimate_s=runtime,
                            organization=f"c{c}",
                            project=queue,
                        )
                    )
    return requests


def _kind(request: Request) -> str:
    return request.id.rsplit("/", 1)[1].split("-", 1)[0]


def engine_alone(scale: float) -> dict[str, Any]:
    """The figures of the engine alone on ``bench e2e``'s workloads at ``scale``."""
    nodes, policy = fleet()
    requests = workloads(scale)
    total_gpus = sum(node.gpu_count for node in nodes)
    kind = {r.id: _kind(r) for r in requests}
    demand = {r.id: r.gpu_demand_milli / WHOLE for r in requests}
    runtime = {r.id: r.runtime_estimate_s or 0.0 for r in requests}
    by_id = {r.id: r for r in requests}
    pending = dict(by_id)
    engine = Scheduler(Snapshot(nodes), policy)
    running: dict[str, tuple[float, Allocation]] = {}
    now = cpu = held = preempted_gpu_s = 0.0
    cycles = preemptions = runs = 0
    free = float(total_gpus)
    # Per class: GPU-seconds of the free GPUs its waiting work could have used, by reason.
    idle_while_waiting: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    reason_cycles: dict[str, Counter[str]] = defaultdict(Counter)
    free_over_time: list[tuple[float, float]] = []
    usage = FairShareUsage(settings.SCHEDULER_FAIRSHARE_HALF_LIFE_S)
    while pending or running:
        began = time.process_time()
        engine.fair_share(*usage.as_of(now))
        decisions = engine.cycle(list(pending.values()), now)
        cpu += time.process_time() - began
        cycles += 1
        for preemption in decisions.preemptions:
            victim = preemption.victim
            started, allocation = running.pop(victim)
            gpus = allocation.gpu_milli / WHOLE
            held += gpus * (now - (started - runtime[victim]))
            preempted_gpu_s += gpus * (now - (started - runtime[victim]))
            free += gpus
            usage.stop(allocation.queue, allocation.organization, allocation.gpu_milli, now)
            pending[victim] = by_id[victim]
            preemptions += 1
        for allocation in decisions.allocations:
            del pending[allocation.workload]
            runs += 1
            running[allocation.workload] = (now + runtime[allocation.workload], allocation)
            free -= allocation.gpu_milli / WHOLE
            usage.start(allocation.queue, allocation.organization, allocation.gpu_milli, now)
        if not running:
            break  # what is left can never start
        later = min(end for end, _ in running.values())
        free_over_time.append((now, free))
        for workload, reason in decisions.pending.items():
            reason_cycles[kind[workload]][reason.code.value] += 1
        _idle(decisions.pending, kind, demand, free, later - now, idle_while_waiting)
        now = later
        for workload, (end, allocation) in list(running.items()):
            if end <= now:
                del running[workload]
                engine.release(allocation)
                gpus = allocation.gpu_milli / WHOLE
                held += gpus * runtime[workload]
                free += gpus
                usage.stop(allocation.queue, allocation.organization, allocation.gpu_milli, now)
    return {
        "engine_makespan_s": round(now, 2),
        "engine_usage_pct": round(100 * held / (total_gpus * now), 1) if now else 0.0,
        "engine_cycles": cycles,
        "engine_cpu_s": round(cpu, 2),
        "engine_scheduled_per_s": round(len(requests) / cpu, 1) if cpu else 0.0,
        "engine_preemptions": preemptions,
        "engine_preempted_gpu_s": round(preempted_gpu_s, 1),
        "engine_left_pending": len(pending),
        "engine_runs": runs,  # grants: every workload once, and once more per preemption
        "engine_free_gpus_at_end": engine.capacity.free_gpus_of(None),
        "engine_work_gpu_s": round(sum(demand[r] * runtime[r] for r in demand), 1),
        "engine_idle_gpu_s": round(total_gpus * now - held, 1),
        "engine_idle_while_waiting_gpu_s": {
            k: {code: round(s, 1) for code, s in sorted(v.items())}
            for k, v in sorted(idle_while_waiting.items())
        },
        "engine_pending_reasons": {
            k: dict(sorted(v.items())) for k, v in sorted(reason_cycles.items())
        },
        "engine_free_gpus_by_decile": _deciles(free_over_time, now),
    }


def _idle(
    waiting: Mapping[str, PendingReason],
    kind: dict[str, str],
    demand: dict[str, float],
    free: float,
    seconds: float,
    into: dict[str, dict[str, float]],
) -> None:
    """The free GPUs over ``seconds`` that work waiting for them could have used, by class and
    reason: each class's share is its waiting demand, up to what is free."""
    wanted: dict[tuple[str, str], float] = defaultdict(float)
    for workload, reason in waiting.items():
        wanted[(kind[workload], reason.code.value)] += demand[workload]
    total = sum(wanted.values())
    if not total or free <= 0:
        return
    usable = min(free, total)
    for (k, code), gpus in wanted.items():
        into[k][code] += usable * gpus / total * seconds


def _deciles(samples: list[tuple[float, float]], end: float) -> list[float]:
    """Mean free GPUs in each tenth of the makespan (each sample holds until the next)."""
    if not end:
        return []
    tenths = [0.0] * 10
    for i, (at, free) in enumerate(samples):
        until = samples[i + 1][0] if i + 1 < len(samples) else end
        while at < until:
            tenth = min(9, int(at / end * 10))
            step = min(until, (tenth + 1) * end / 10) - at
            tenths[tenth] += free * step
            at += step
            if step <= 0:
                break
    return [round(t / (end / 10), 1) for t in tenths]


@suite("kueue-engine")
def bench_kueue_engine(scale: float) -> dict[str, Any]:
    return {
        "workloads": len(workloads(scale)),
        **engine_alone(scale),
        "peak_rss_mb": peak_rss_mb(),
    }
