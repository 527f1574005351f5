"""Invariants of the engine on random fleets, allocations, queues and workloads."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import Allocation, Decisions, Policy, Request, Snapshot, Topology, schedule
from scheduler.engine.model import WHOLE
from tests.strategies import NOW, SETTINGS, decided, open_reservation, scenarios


def _final(snapshot: Snapshot, decisions: Decisions) -> list[Allocation]:
    victims = {p.victim for p in decisions.preemptions}
    kept = [a for a in snapshot.allocations if a.workload not in victims]
    return kept + [a for a in decisions.allocations if a.workload not in victims]


@SETTINGS
@given(scenarios())
def test_no_gpu_cpu_or_memory_is_ever_over_allocated(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    snapshot, _pending, _policy = scenario
    decisions = decided(scenario)

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
    snapshot, pending, _policy = scenario
    decisions = decided(scenario)

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
    snapshot, _pending, policy = scenario
    decisions = decided(scenario)

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
    snapshot, _pending, policy = scenario
    decisions = decided(scenario)

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
    snapshot, _pending, policy = scenario
    decisions = decided(scenario)
    reservation = open_reservation(policy)
    if reservation is None:
        return
    # Replayed grant by grant, work of others takes at most the whole GPUs free less those the
    # window holds: victims only free GPUs, and the owner's own grants only use what it holds
    # (or more), so over the cycle others take at most what is free once every victim is gone,
    # less what the window held at its start.
    model = reservation.gpu_model
    victims = {p.victim for p in decisions.preemptions}
    left = tuple(a for a in snapshot.allocations if a.workload not in victims)
    free = _whole_free(Snapshot(snapshot.nodes, left), model)
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
    assert others <= max(0, free - held)


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
