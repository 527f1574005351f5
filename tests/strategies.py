"""Hypothesis strategies of engine inputs: random fleets, queues, reservations and workloads,
and the settings the engine's property tests run with (shared by the invariants, the stateful
``Scheduler`` tests and the benchmark's check)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from scheduler.engine import (
    Node,
    Policy,
    QueueConfig,
    Request,
    Reservation,
    Snapshot,
    Topology,
    schedule,
)
from scheduler.engine.model import WHOLE

MODELS = ("h100", "t4")
QUEUES = ("qa", "qb", "qc")
NOW = 50_000.0


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Node, ...]:
    count = draw(st.integers(1, 6))
    result = []
    for i in range(count):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        domains = draw(st.sampled_from([1, 2])) if gpus >= 2 else 1
        result.append(
            Node(
                name=f"n{i}",
                gpu_model=draw(st.sampled_from(MODELS)),
                gpu_domains=tuple(g * domains // gpus for g in range(gpus)),
                cpu_milli=draw(st.sampled_from([8_000, 32_000, 96_000])),
                memory_mib=draw(st.sampled_from([65_536, 262_144])),
                rack=f"r{draw(st.integers(0, 2))}",
                schedulable=draw(st.booleans()) or i == 0,
                shareable=draw(st.booleans()),
            )
        )
    return tuple(result)


@st.composite
def requests(draw: st.DrawFn, prefix: str) -> list[Request]:
    result = []
    for i in range(draw(st.integers(0, 10))):
        fractional = draw(st.booleans()) and draw(st.booleans())
        nodes = 1 if fractional else draw(st.sampled_from([1, 1, 1, 2, 3]))
        # Sometimes an elastic gang: at least ``min_nodes`` of its nodes.
        min_nodes = draw(st.sampled_from([None, None, *range(1, nodes + 1)])) if nodes > 1 else None
        result.append(
            Request(
                id=f"{prefix}{i}",
                queue=draw(st.sampled_from(QUEUES)),
                gpus_per_node=1 if fractional else draw(st.sampled_from([1, 2, 4, 8])),
                nodes=nodes,
                gpu_milli=draw(st.sampled_from([250, 500])) if fractional else WHOLE,
                cpu_milli=draw(st.sampled_from([0, 4_000, 16_000])),
                memory_mib=draw(st.sampled_from([0, 32_768])),
                gpu_models=draw(st.sampled_from([(), ("h100",), ("t4",), ("t4", "h100")])),
                priority=draw(st.integers(0, 3)),
                preemptible=draw(st.booleans()),
                topology=draw(st.sampled_from(list(Topology))),
                runtime_estimate_s=draw(st.sampled_from([None, 600.0, 7200.0])),
                organization=draw(st.sampled_from(["o1", "o2"])),
                submitted_at=float(draw(st.integers(0, int(NOW)))),
                min_nodes=min_nodes,
            )
        )
    return result


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    queues = {}
    for name in QUEUES:
        if draw(st.booleans()):
            queues[name] = QueueConfig(
                name=name,
                cohort=draw(st.sampled_from(["", "lab"])),
                nominal={m: draw(st.integers(0, 12)) for m in MODELS},
                borrowing_limit=draw(st.sampled_from([None, 0, 2, 8])),
                lending_limit=draw(st.sampled_from([None, 0, 4])),
                weight=draw(st.sampled_from([1.0, 2.0])),
            )
    reservations: tuple[Reservation, ...] = ()
    if draw(st.booleans()):
        reservations = (
            Reservation(
                "res",
                queue=draw(st.sampled_from(QUEUES)),
                gpu_model=draw(st.sampled_from(MODELS)),
                gpus=draw(st.integers(1, 8)),
                starts_at=NOW - 100,
                ends_at=NOW + 3600,
            ),
        )
    # Sometimes organizations with a quota of their own, below what their queues add up to.
    organizations = {
        organization: {m: draw(st.integers(0, 10)) for m in MODELS}
        for organization in ("o1", "o2")
        if draw(st.booleans())
    }
    # Sometimes typical shapes that name their CPU: the CPU-aware placement path.
    cpu_aware: dict[tuple[int, ...], float] = {(1, 1000, 1, 4_000): 2.0, (8, 1000, 1, 32_000): 1.0}
    shapes = draw(st.sampled_from([{}, cpu_aware]))
    return Policy(
        queues=queues,
        organizations=organizations,
        reservations=reservations,
        backfill=draw(st.booleans()),
        typical_shapes=shapes,
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    fleet = draw(fleets())
    policy = draw(policies())
    # Running work is whatever an earlier cycle granted: a reachable state.
    earlier = schedule(Snapshot(fleet), draw(requests("old")), policy, NOW - 1000)
    return Snapshot(fleet, earlier.allocations), draw(requests("new")), policy


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
