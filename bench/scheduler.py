"""``manage.py bench scheduler``: one scheduling cycle on a 10,000-GPU cluster, and the next.

Pure engine, no database. A seeded synthetic cluster (1,250 nodes x 8 GPUs at scale 1, racks
of 16, one NVLink domain per NVSwitch node and some 2x4 nodes, H100 and shareable L40S), ten
queues in two cohorts with nominal quotas, a quarter of the fleet already busy, and 10,000
pending workloads of a realistic mix: 1-GPU and fractional jobs, 2/4/8-GPU single-node jobs, a
few multi-node gangs with topology requirements, priorities and runtime estimates.

Measured (each the best of ``ROUNDS`` runs from the same state, the engine and both baselines
alike: the machine's other load only ever adds time):
- ``full_cycle_ms``: ``schedule()`` from the snapshot with every workload pending;
- ``incremental_cycle_ms``: then one allocation of that cycle is released and the workloads
  still waiting are scheduled again, by the ``Scheduler`` that kept its state from the full
  cycle (``rescheduled_full_ms`` is the same cycle run from scratch by ``schedule()``). Work
  granted in a cycle is not preempted in it, so this second cycle also preempts what the
  first one granted to lower priorities (``incremental_preemptions``, of which
  ``incremental_victims_granted_by_full_cycle``): the first cycle orders by effective
  priority (aging), preemption compares priorities;
- ``steady_cycle_ms``: the cycle after that, once more after one allocation ends: the
  workloads still waiting, with nothing owed from the first cycle;
- ``baseline_decisions_per_s``: a naive first-fit (arrival order, first node with enough free
  GPUs, CPU and memory; no quotas, priorities, topology or fragmentation) on the same scenario
  in the same process, node by node;
- ``grouped_baseline_decisions_per_s``: the same first-fit weighing each group of nodes in one
  GPU state once, as the engine does (``bench.first_fit``): the same placements, and the
  baseline that is not a straw man.

A decision is one pending workload either granted or given its reason.
"""

from __future__ import annotations

import os
import platform
import random
import time
from collections.abc import Callable
from typing import Any

from bench.first_fit import first_fit, grouped_first_fit
from bench.registry import engine_build, peak_rss_mb, suite
from scheduler.engine import (
    Allocation,
    Decisions,
    Node,
    Placement,
    Policy,
    QueueConfig,
    Request,
    Snapshot,
    Topology,
    schedule,
)
from scheduler.engine.cycle import Scheduler
from scheduler.engine.model import WHOLE

SEED = 20240611
NODES = 1250
PENDING = 10_000
RACK_SIZE = 16
NOW = 1_000_000.0
CPU_MILLI = 192_000
MEMORY_MIB = 2_097_152
QUEUES = 10
ROUNDS = 3


def _fleet(count: int, rng: random.Random) -> tuple[Node, ...]:
    """Four H100 nodes in five (some split in two NVLink domains of 4), one shareable L40S."""
    fleet = []
    for i in range(count):
        l40s = i % 5 == 4
        split = l40s or rng.random() < 0.15
        fleet.append(
            Node(
                name=f"node-{i:05d}",
                gpu_model="l40s" if l40s else "h100",
                gpu_domains=tuple(g // 4 if split else 0 for g in range(8)),
                cpu_milli=CPU_MILLI,
                memory_mib=MEMORY_MIB,
                rack=f"rack-{i // RACK_SIZE:03d}",
                schedulable=rng.random() > 0.01,
                shareable=l40s,
            )
        )
    return tuple(fleet)


def _policy(fleet: tuple[Node, ...]) -> Policy:
    """Ten queues in two cohorts; nominal quotas share out the fleet, some lend or cap borrowing."""
    per_model = {m: sum(8 for n in fleet if n.gpu_model == m) for m in ("h100", "l40s")}
    queues = {}
    for q in range(QUEUES):
        name = f"q{q}"
        queues[name] = QueueConfig(
            name=name,
            cohort="research" if q < QUEUES // 2 else "production",
            nominal={m: total // QUEUES for m, total in per_model.items()},
            borrowing_limit=None if q % 3 else per_model["h100"] // 20,
            lending_limit=None if q % 4 else per_model["h100"] // 40,
            weight=2.0 if q >= QUEUES // 2 else 1.0,
            organization=f"org{q // 2}",
        )
    return Policy(queues=queues, usage_history={f"q{q}": 10.0 * q for q in range(QUEUES)})


def _shape(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.40:
        return {"gpus_per_node": 1, "gpu_models": ("h100",)}
    if roll < 0.60:
        return {"gpu_milli": rng.choice((250, 500)), "gpu_models": ("l40s",)}
    if roll < 0.70:
        return {"gpus_per_node": 1, "gpu_models": ("h100", "l40s")}
    if roll < 0.82:
        return {"gpus_per_node": 2, "gpu_models": ("h100",)}
    if roll < 0.91:
        topology = Topology.SAME_NVLINK_DOMAIN if rng.random() < 0.5 else Topology.ANY
        return {"gpus_per_node": 4, "gpu_models": ("h100",), "topology": topology}
    if roll < 0.975:
        return {"gpus_per_node": 8, "gpu_models": ("h100",), "topology": Topology.SINGLE_NODE}
    topology = Topology.SAME_RACK if rng.random() < 0.5 else Topology.ANY
    return {
        "gpus_per_node": 8,
        "nodes": rng.choice((2, 2, 4)),
        "gpu_models": ("h100",),
        "topology": topology,
    }


def _request(id: str, rng: random.Random) -> Request:
    shape = _shape(rng)
    gpus = shape.get("gpus_per_node", 1)
    queue = rng.randrange(QUEUES)
    return Request(
        id=id,
        queue=f"q{queue}",
        cpu_milli=gpus * 8_000,
        memory_mib=gpus * 65_536,
        priority=rng.choice((0, 0, 0, 1, 1, 2, 5)),
        preemptible=rng.random() < 0.3,
        runtime_estimate_s=rng.choice((None, 600.0, 3600.0, 4 * 3600.0, 24 * 3600.0)),
        organization=f"org{queue // 2}",
        submitted_at=NOW - rng.uniform(0, 2 * 3600),
        **shape,
    )


def _running(fleet: tuple[Node, ...], rng: random.Random) -> tuple[Allocation, ...]:
    """A quarter of the nodes already run small jobs (whole and shared GPUs)."""
    allocations = []
    for node in fleet[::4]:
        if not node.schedulable:
            continue
        taken = 0
        while taken < 8 and rng.random() < 0.8:
            gpus = min(rng.choice((1, 1, 2, 4)), 8 - taken)
            shared = node.shareable and gpus == 1 and rng.random() < 0.5
            queue = rng.randrange(QUEUES)
            allocations.append(
                Allocation(
                    workload=f"run-{node.name}-{taken}",
                    queue=f"q{queue}",
                    gpu_model=node.gpu_model,
                    placements=(
                        Placement(
                            node=node.name,
                            gpus=tuple(range(taken, taken + gpus)),
                            gpu_milli=500 if shared else WHOLE,
                            cpu_milli=gpus * 8_000,
                            memory_mib=gpus * 65_536,
                        ),
                    ),
                    priority=rng.choice((0, 1, 2)),
                    preemptible=rng.random() < 0.4,
                    organization=f"org{queue // 2}",
                    started_at=NOW - rng.uniform(0, 3600),
                    ends_at=NOW + rng.uniform(60, 8 * 3600),
                )
            )
            taken += gpus
    return tuple(allocations)


def scenario(scale: float, pending_count: int = PENDING) -> tuple[Snapshot, list[Request], Policy]:
    """The seeded cluster, its running work, the pending workloads and the policy."""
    rng = random.Random(SEED)  # noqa: S311 -- a reproducible scenario, not a secret
    fleet = _fleet(max(8, round(NODES * scale)), rng)
    running = _running(fleet, rng)
    count = max(20, round(pending_count * scale))
    pending = [_request(f"w{i:05d}", rng) for i in range(count)]
    return Snapshot(fleet, running), pending, _policy(fleet)


# --- measuring --------------------------------------------------------------------------------


def _timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def _after(snapshot: Snapshot, decisions: Decisions) -> tuple[Allocation, ...]:
    victims = {p.victim for p in decisions.preemptions}
    kept = [a for a in snapshot.allocations if a.workload not in victims]
    return tuple(kept + list(decisions.allocations))


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _rate(decisions: int, seconds: float) -> float:
    return round(decisions / seconds, 1) if seconds > 0 else 0.0


def _ratio(engine_s: float, baseline_s: float) -> float | None:
    """The engine's decisions per second over a baseline's on the same workloads."""
    return round(baseline_s / engine_s, 3) if engine_s > 0 else None


def _round(snapshot: Snapshot, pending: list[Request], policy: Policy) -> dict[str, Any]:
    """The full cycle, the release, the incremental cycle, the steady one after another
    release, and their checks against ``schedule()``; timed once."""
    # 1. The full cycle, by a Scheduler that keeps its state for the next one.
    engine = Scheduler(snapshot, policy)
    full, full_s = _timed(lambda: engine.cycle(pending, NOW))
    checked = schedule(snapshot, pending, policy, NOW)
    same = checked == full  # the stateful scheduler decides as schedule() does

    # 2. One allocation granted by that cycle ends; the workloads still waiting are scheduled
    #    again a second later.
    allocations = _after(snapshot, full)
    released = full.allocations[len(full.allocations) // 2] if full.allocations else None
    waiting = [r for r in pending if r.id in full.pending]
    later = NOW + 1.0
    if released is not None:
        engine.release(released)
        allocations = tuple(a for a in allocations if a.workload != released.workload)
    incremental, incremental_s = _timed(lambda: engine.cycle(waiting, later))
    from_scratch, rescheduled_s = _timed(
        lambda: schedule(Snapshot(snapshot.nodes, allocations), waiting, policy, later)
    )

    # 3. Steady state: one more allocation ends, the workloads still waiting are scheduled
    #    again a second later (the preemptions the first cycle's grants owed are done).
    allocations = _after(Snapshot(snapshot.nodes, allocations), incremental)
    ended = incremental.allocations or full.allocations
    still = [r for r in waiting if r.id in incremental.pending]
    if ended:
        engine.release(ended[0])
        allocations = tuple(a for a in allocations if a.workload != ended[0].workload)
    steady, steady_s = _timed(lambda: engine.cycle(still, later + 1.0))
    expected = schedule(Snapshot(snapshot.nodes, allocations), still, policy, later + 1.0)
    return {
        "full": full,
        "full_s": full_s,
        "waiting": waiting,
        "incremental": incremental,
        "incremental_s": incremental_s,
        "rescheduled_s": rescheduled_s,
        "still": still,
        "steady": steady,
        "steady_s": steady_s,
        "same": same and from_scratch == incremental and expected == steady,
    }


@suite("scheduler")
def scheduler(scale: float) -> dict[str, Any]:
    """A full cycle, an incremental and a steady one, and two first-fit baselines; see the
    module docstring."""
    snapshot, pending, policy = scenario(scale)

    naive = [_timed(lambda: first_fit(snapshot, pending)) for _ in range(ROUNDS)]
    grouped = [_timed(lambda: grouped_first_fit(snapshot, pending)) for _ in range(ROUNDS)]
    placed_naively, baseline_s = naive[0][0], min(seconds for _, seconds in naive)
    placed_grouped, grouped_s = grouped[0][0], min(seconds for _, seconds in grouped)
    rounds = [_round(snapshot, pending, policy) for _ in range(ROUNDS)]
    first = rounds[0]
    full, incremental, waiting = first["full"], first["incremental"], first["waiting"]
    full_s = min(r["full_s"] for r in rounds)
    incremental_s = min(r["incremental_s"] for r in rounds)
    rescheduled_s = min(r["rescheduled_s"] for r in rounds)
    steady, steady_s = first["steady"], min(r["steady_s"] for r in rounds)
    granted_first = {a.workload for a in full.allocations}

    figures = {
        "nodes": len(snapshot.nodes),
        "gpus": sum(n.gpu_count for n in snapshot.nodes),
        "running_before": len(snapshot.allocations),
        "pending": len(pending),
        "allocations": len(full.allocations),
        "preemptions": len(full.preemptions),
        "still_pending": len(full.pending),
        "full_cycle_ms": _ms(full_s),
        "decisions_per_s": _rate(len(pending), full_s),
        "incremental_cycle_ms": _ms(incremental_s),
        "incremental_allocations": len(incremental.allocations),
        "incremental_preemptions": len(incremental.preemptions),
        "incremental_decisions_per_s": _rate(len(waiting), incremental_s),
        "incremental_victims_granted_by_full_cycle": sum(
            p.victim in granted_first for p in incremental.preemptions
        ),
        "rescheduled_full_ms": _ms(rescheduled_s),
        "steady_cycle_ms": _ms(steady_s),
        "steady_pending": len(first["still"]),
        "steady_allocations": len(steady.allocations),
        "steady_preemptions": len(steady.preemptions),
        "baseline_ms": _ms(baseline_s),
        "baseline_allocations": len(placed_naively),
        "baseline_decisions_per_s": _rate(len(pending), baseline_s),
        "grouped_baseline_ms": _ms(grouped_s),
        "grouped_baseline_allocations": len(placed_grouped),
        "grouped_baseline_decisions_per_s": _rate(len(pending), grouped_s),
        "baselines_place_alike": placed_grouped == placed_naively,
        "same_decisions_as_schedule": all(r["same"] for r in rounds)
        and all(
            r["full"] == full and r["incremental"] == incremental and r["steady"] == steady
            for r in rounds
        ),
    }
    return {
        "suite": "scheduler",
        "unit": "decisions/s",
        "scale": scale,
        "figures": figures,
        "baseline": "naive first-fit in arrival order, no quotas, node by node (baseline_*) and"
        " by groups of identical nodes as the engine weighs them (grouped_baseline_*)",
        "ratios": {
            "decisions_vs_baseline": _ratio(full_s, baseline_s),
            "decisions_vs_grouped_baseline": _ratio(full_s, grouped_s),
            "incremental_vs_full": round(incremental_s / full_s, 4) if full_s else None,
        },
        "peak_rss_mb": peak_rss_mb(),
        "engine": engine_build(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
