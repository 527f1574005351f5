"""Invariants of the engine on random fleets, allocations, queues and workloads."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.engine import (
    Allocation,
    Decisions,
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


def _final(snapshot: Snapshot, decisions: Decisions) -> list[Allocation]:
    victims = {p.victim for p in decisions.preemptions}
    kept = [a for a in snapshot.allocations if a.workload not in victims]
    return kept + [a for a in decisions.allocations if a.workload not in victims]


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(scenarios())
def test_no_gpu_cpu_or_memory_is_ever_over_allocated(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    snapshot, pending, policy = scenario
    decisions = schedule(snapshot, pending, policy, NOW)

    nodes = {n.name: n for n in snapshot.nodes}
    gpu_use: dict[tuple[str, int], int] = defaultdict(int)
    cpu_use: dict[str, int] = defaultdict(int)
    memory_use: dict[str, int] = defaultdict(int)
    for allocation in _final(snapshot, decisions):
        for placement in allocation.placements:
            for index in placement.gpus:
                gpu_use[(placement.node, index)] += placement.gpu_milli
            cpu_use[placement.node] += placement.cpu_milli
            memory_use[placement.node] += placement.memory_mib
    assert all(use <= WHOLE for use in gpu_use.values())
    assert all(cpu_use[n] <= nodes[n].cpu_milli for n in cpu_use)
    assert all(memory_use[n] <= nodes[n].memory_mib for n in memory_use)
    for allocation in decisions.allocations:
        for placement in allocation.placements:
            node = nodes[placement.node]
            assert node.schedulable
            assert all(0 <= i < node.gpu_count for i in placement.gpus)
            if placement.gpu_milli < WHOLE:
                assert node.shareable


@SETTINGS
@given(scenarios())
def test_gangs_models_and_topology_are_honoured(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    snapshot, pending, policy = scenario
    decisions = schedule(snapshot, pending, policy, NOW)

    nodes = {n.name: n for n in snapshot.nodes}
    asked = {r.id: r for r in pending}
    for allocation in decisions.allocations:
        request = asked[allocation.workload]
        placements = allocation.placements
        # All of the gang, or at least its minimum (an elastic gang), or nothing.
        least = request.nodes if request.min_nodes is None else request.min_nodes
        assert least <= len(placements) <= request.nodes
        assert len({p.node for p in placements}) == len(placements)
        assert all(len(p.gpus) == request.gpus_per_node for p in placements)
        assert all(nodes[p.node].gpu_model == allocation.gpu_model for p in placements)
        if request.gpu_models:
            assert allocation.gpu_model in request.gpu_models
        if request.topology is Topology.SINGLE_NODE:
            assert len(placements) == 1
        if request.topology is Topology.SAME_RACK:
            assert len({nodes[p.node].rack for p in placements}) == 1
        if request.topology is Topology.SAME_NVLINK_DOMAIN:
            for p in placements:
                assert len({nodes[p.node].gpu_domains[i] for i in p.gpus}) == 1
    assert set(decisions.pending) | {a.workload for a in decisions.allocations} == set(asked)
    assert not set(decisions.pending) & {a.workload for a in decisions.allocations}


@SETTINGS
@given(scenarios())
def test_quotas_and_borrowing_limits_hold(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    snapshot, pending, policy = scenario
    decisions = schedule(snapshot, pending, policy, NOW)

    # Replayed grant by grant, victims first: a queue may always use its nominal quota (even
    # when its cohort then lends less than others already borrow: reclaiming is preemption's
    # business); beyond it, a grant borrows within the queue's limit and what the rest of the
    # cohort lends unused at that moment.
    used: dict[tuple[str, str], int] = defaultdict(int)
    for allocation in snapshot.allocations:
        used[(allocation.queue, allocation.gpu_model or "")] += allocation.gpu_milli
    running = {a.workload: a for a in snapshot.allocations}
    victims: dict[str, list[Allocation]] = defaultdict(list)
    for preemption in decisions.preemptions:
        victims[preemption.for_workload].append(running[preemption.victim])
    for allocation in decisions.allocations:
        for victim in victims[allocation.workload]:
            used[(victim.queue, victim.gpu_model or "")] -= victim.gpu_milli
        model = allocation.gpu_model or ""
        used[(allocation.queue, model)] += allocation.gpu_milli
        queue = policy.queues.get(allocation.queue)
        if queue is None:
            continue
        beyond = used[(queue.name, model)] - queue.nominal.get(model, 0) * WHOLE
        if beyond <= 0:
            continue
        assert queue.cohort
        if queue.borrowing_limit is not None:
            assert beyond <= queue.borrowing_limit * WHOLE
        lent = borrowed = 0
        for other in policy.queues.values():
            if other.cohort != queue.cohort or other.name == queue.name:
                continue
            nominal = other.nominal.get(model, 0) * WHOLE
            lendable = nominal if other.lending_limit is None else other.lending_limit * WHOLE
            lent += min(lendable, max(0, nominal - used[(other.name, model)]))
            borrowed += max(0, used[(other.name, model)] - nominal)
        assert beyond <= lent - borrowed


@SETTINGS
@given(scenarios())
def test_an_organizations_gpus_never_exceed_its_quota(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    """Over all of its queues, whatever their own quotas and borrowing: replayed grant by
    grant, victims first."""
    snapshot, pending, policy = scenario
    decisions = schedule(snapshot, pending, policy, NOW)

    used: dict[tuple[str, str], int] = defaultdict(int)
    for allocation in snapshot.allocations:
        used[(allocation.organization, allocation.gpu_model or "")] += allocation.gpu_milli
    running = {a.workload: a for a in snapshot.allocations}
    victims: dict[str, list[Allocation]] = defaultdict(list)
    for preemption in decisions.preemptions:
        victims[preemption.for_workload].append(running[preemption.victim])

    def within(key: tuple[str, str]) -> bool:
        organization, model = key
        quota = policy.organizations.get(organization, {}).get(model)
        return quota is None or used[key] <= quota * WHOLE

    assert all(within(key) for key in list(used))
    for allocation in decisions.allocations:
        for victim in victims[allocation.workload]:
            used[(victim.organization, victim.gpu_model or "")] -= victim.gpu_milli
        key = (allocation.organization, allocation.gpu_model or "")
        used[key] += allocation.gpu_milli
        assert within(key)


@SETTINGS
@given(scenarios())
def test_reservations_hold_capacity_from_others(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    snapshot, pending, policy = scenario
    decisions = schedule(snapshot, pending, policy, NOW)
    if not policy.reservations or decisions.preemptions:
        return
    (reservation,) = policy.reservations
    model = reservation.gpu_model
    free_before = _whole_free(snapshot, model)
    owner_before = (
        sum(
            a.gpu_milli
            for a in snapshot.allocations
            if a.queue == reservation.queue and a.gpu_model == model
        )
        // WHOLE
    )
    held = max(0, reservation.gpus - owner_before)
    others = sum(
        a.gpu_milli // WHOLE * (a.placements[0].gpu_milli == WHOLE)
        for a in decisions.allocations
        if a.queue != reservation.queue and a.gpu_model == model
    )
    assert others <= max(0, free_before - held)


def _whole_free(snapshot: Snapshot, model: str) -> int:
    used: dict[tuple[str, int], int] = defaultdict(int)
    for allocation in snapshot.allocations:
        for placement in allocation.placements:
            for index in placement.gpus:
                used[(placement.node, index)] += placement.gpu_milli
    return sum(
        1
        for node in snapshot.nodes
        if node.schedulable and node.gpu_model == model
        for index in range(node.gpu_count)
        if used[(node.name, index)] == 0
    )


@SETTINGS
@given(scenarios(), st.randoms())
def test_decisions_are_deterministic(
    scenario: tuple[Snapshot, list[Request], Policy], rng: random.Random
) -> None:
    snapshot, pending, policy = scenario
    shuffled = list(pending)
    rng.shuffle(shuffled)

    assert schedule(snapshot, pending, policy, NOW) == schedule(snapshot, shuffled, policy, NOW)
