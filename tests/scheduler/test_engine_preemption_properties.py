"""Properties of preemption on random scenarios (README's promises): every victim is
legitimate, none could be spared, and none is taken while cheaper candidates would do.

Each grant is replayed in the cycle's order (its victims go just before it), so every check
reads the cluster and quota usage as the engine had them when it chose those victims.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given

from scheduler.engine import (
    Allocation,
    Decisions,
    Policy,
    Preemption,
    PreemptionCode,
    QueueConfig,
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    schedule,
)
from scheduler.engine.capacity import Capacity
from scheduler.engine.cycle import shapes_of
from scheduler.engine.model import WHOLE
from scheduler.engine.placement import place
from scheduler.engine.quota import QuotaLedger
from tests.builders.engine import job, nodes
from tests.builders.engine import running as allocation_on
from tests.strategies import NOW, SETTINGS, decided, scenarios

Scenario = tuple[Snapshot, list[Request], Policy]
CAPACITY_CODES = {PreemptionCode.PRIORITY, PreemptionCode.RECLAIM, PreemptionCode.RESERVATION}


def _steps(
    snapshot: Snapshot, decisions: Decisions
) -> Iterator[tuple[Allocation, list[Preemption], dict[str, Allocation]]]:
    """Each grant with its preemptions and the work running just before them."""
    running = {a.workload: a for a in snapshot.allocations}
    preemptions: dict[str, list[Preemption]] = defaultdict(list)
    for preemption in decisions.preemptions:
        preemptions[preemption.for_workload].append(preemption)
    for allocation in decisions.allocations:
        yield allocation, preemptions[allocation.workload], dict(running)
        for preemption in preemptions[allocation.workload]:
            del running[preemption.victim]
        running[allocation.workload] = allocation


def _used(running: Iterable[Allocation]) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = defaultdict(int)
    for allocation in running:
        used[(allocation.queue, allocation.gpu_model or "")] += allocation.gpu_milli
    return used


def _codes(
    victim: Allocation,
    request: Request,
    model: str,
    used: dict[tuple[str, str], int],
    policy: Policy,
) -> set[PreemptionCode]:
    """The codes under which ``victim`` may be taken back for ``request`` on ``model``, by the
    rules README states: lower-priority preemptible work (``priority``, ``quota`` when it is of
    the request's queue); work of a queue borrowing beyond its nominal quota of the model, for
    a queue within its own (``reclaim``); preemptible work of others, for the owner's work on
    its reservation of the model while its window is open (``reservation``)."""
    codes: set[PreemptionCode] = set()
    if victim.gpu_model != model or victim.workload == request.id:
        return codes
    if victim.preemptible and victim.priority < request.priority:
        codes.add(PreemptionCode.PRIORITY)
        if victim.queue == request.queue:
            codes.add(PreemptionCode.QUOTA)
    if victim.queue == request.queue:
        return codes
    mine, theirs = policy.queues.get(request.queue), policy.queues.get(victim.queue)
    if (
        mine is not None
        and theirs is not None
        and used[(request.queue, model)] + request.demand_on(request.least_nodes)
        <= mine.nominal.get(model, 0) * WHOLE
        and used[(victim.queue, model)] > theirs.nominal.get(model, 0) * WHOLE
    ):
        codes.add(PreemptionCode.RECLAIM)
    if victim.preemptible and any(
        r.id == request.reservation
        and r.queue == request.queue
        and r.gpu_model == model
        and r.starts_at <= NOW < r.ends_at
        for r in policy.reservations
    ):
        codes.add(PreemptionCode.RESERVATION)
    return codes


def _admits(
    scenario: Scenario, running: Iterable[Allocation], request: Request, model: str, quota: bool
) -> bool:
    """Whether the engine's placement puts the request (its minimum) on ``model`` among
    ``running`` and, for preemption for ``quota``, its queue's and organization's quotas then
    admit that minimum."""
    snapshot, pending, policy = scenario
    running = tuple(running)
    if quota:
        ledger = QuotaLedger(policy, running)
        least = request.demand_on(request.least_nodes)
        if ledger.check(request.queue, model, least, request.organization) is not None:
            return False
    capacity = Capacity(Snapshot(snapshot.nodes, running))
    return place(capacity, request, model, shapes_of(policy, pending)) is not None


def _cost(allocation: Allocation) -> tuple[int, float, int, str]:
    """Cheapest to preempt first: lowest priority, then the most recently started, then the
    smallest, then by id (README)."""
    return (allocation.priority, -allocation.started_at, allocation.gpu_milli, allocation.workload)


@SETTINGS
@given(scenarios())
def test_every_victim_is_legitimate(scenario: Scenario) -> None:
    snapshot, pending, policy = scenario
    decisions = decided(scenario)

    asked = {r.id: r for r in pending}
    before = {a.workload for a in snapshot.allocations}
    granted = {a.workload for a in decisions.allocations}
    assert {p.for_workload for p in decisions.preemptions} <= granted
    for allocation, preemptions, live in _steps(snapshot, decisions):
        request, model = asked[allocation.workload], allocation.gpu_model or ""
        used = _used(live.values())
        # one cause per admission: for capacity, or for its queue's quota
        assert len({p.code is PreemptionCode.QUOTA for p in preemptions}) <= 1
        for preemption in preemptions:
            # it ran before the cycle, is still running, and its code is one its rules give
            assert preemption.victim in before
            assert preemption.victim in live
            victim = live[preemption.victim]
            assert preemption.code in _codes(victim, request, model, used, policy), preemption


@SETTINGS
@given(scenarios())
def test_no_victim_could_be_spared(scenario: Scenario) -> None:
    """1-minimal: with all its victims gone the request fits, and with any one of them kept it
    does not (preemption makes room for an elastic gang's minimum)."""
    snapshot, pending, _policy = scenario
    decisions = decided(scenario)

    asked = {r.id: r for r in pending}
    for allocation, preemptions, live in _steps(snapshot, decisions):
        if not preemptions:
            continue
        request, model = asked[allocation.workload], allocation.gpu_model or ""
        quota = preemptions[0].code is PreemptionCode.QUOTA
        victims = {p.victim for p in preemptions}
        left = [a for a in live.values() if a.workload not in victims]
        assert _admits(scenario, left, request, model, quota)
        for spared in victims:
            kept = [*left, live[spared]]
            assert not _admits(scenario, kept, request, model, quota), spared


@SETTINGS
@given(scenarios())
def test_no_dearer_victim_while_cheaper_candidates_would_do(scenario: Scenario) -> None:
    """Cheapest first: all the candidates cheaper than the dearest victim, taken back together,
    would not have made room (or freed the quota) for the request."""
    snapshot, pending, policy = scenario
    decisions = decided(scenario)

    asked = {r.id: r for r in pending}
    before = {a.workload for a in snapshot.allocations}
    for allocation, preemptions, live in _steps(snapshot, decisions):
        if not preemptions:
            continue
        request, model = asked[allocation.workload], allocation.gpu_model or ""
        quota = preemptions[0].code is PreemptionCode.QUOTA
        wanted = {PreemptionCode.QUOTA} if quota else CAPACITY_CODES
        used = _used(live.values())
        dearest = max(_cost(live[p.victim]) for p in preemptions)
        cheaper = {
            a.workload
            for a in live.values()
            if a.workload in before
            and _cost(a) < dearest
            and _codes(a, request, model, used, policy) & wanted
        }
        left = [a for a in live.values() if a.workload not in cheaper]
        assert not _admits(scenario, left, request, model, quota)


# --- what the properties found, kept as cases ---------------------------------------------------

GUEST = allocation_on("guest", "n0", (0, 1, 2, 3), queue="other", preemptible=True)
COHORT = {
    "mine": QueueConfig("mine", cohort="lab", nominal={"h100": 4}),
    "other": QueueConfig("other", cohort="lab", nominal={"h100": 0}),
}


def _window(model: str, opens: float, closes: float, owner: str = "mine") -> tuple[Reservation]:
    return (Reservation("r1", owner, model, 4, NOW + opens, NOW + closes),)


@pytest.mark.parametrize(
    "reservations",
    [
        pytest.param(_window("t4", -100, 3600), id="a-reservation-of-another-gpu-model"),
        pytest.param(_window("h100", -3600, -1), id="a-window-that-has-closed"),
        pytest.param(_window("h100", 600, 3600), id="a-window-not-open-yet"),
    ],
)
def test_a_reservation_evicts_only_on_its_model_while_its_window_is_open(
    reservations: tuple[Reservation],
) -> None:
    # given a node full of another queue's preemptible work (of the owner's priority)
    fleet = (*nodes("n", 1, gpus=4), *nodes("t", 1, gpus=4, model="t4"))
    busy = (GUEST, allocation_on("t4-guest", "t0", (0, 1, 2, 3), queue="other", model="t4"))
    # when the owner's work on the reservation arrives, for h100
    mine = job("mine", 4, queue="mine", reservation="r1", gpu_models=("h100",))
    decisions = schedule(Snapshot(fleet, busy), [mine], Policy(reservations=reservations), NOW)

    # then nobody is evicted: the window holds no h100 now
    assert decisions.preemptions == ()
    assert set(decisions.pending) == {"mine"}


@pytest.mark.parametrize(
    "named",
    [
        pytest.param("r1", id="a-reservation-its-queue-does-not-own"),
        pytest.param("nowhere", id="a-reservation-that-does-not-exist"),
    ],
)
def test_work_naming_a_reservation_not_its_own_takes_nothing_back(named: str) -> None:
    """Work on a reservation runs only on it (the reservation cap): naming one its queue does
    not own, or none that exists, it waits outside it and reclaims nothing, even from a
    borrower of its own quota (before the cap it reclaimed, labelled ``reservation``)."""
    # given a borrower's work on the whole node, and another queue's open reservation
    policy = Policy(queues=COHORT, reservations=_window("h100", -100, 3600, owner="other"))
    # when work of the queue whose quota it borrows arrives, naming a reservation not its own
    mine = job("mine", 4, queue="mine", reservation=named)
    decisions = schedule(Snapshot(tuple(nodes("n", 1, gpus=4)), (GUEST,)), [mine], policy, NOW)

    # then nothing is taken back, and it says why it waits
    assert decisions.preemptions == ()
    assert decisions.pending["mine"].code is ReasonCode.OUTSIDE_RESERVATION
