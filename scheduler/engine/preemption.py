"""Preemption: who may lose GPUs for a request, the fewest of them that make it fit (or free
its queue's quota), and why each goes (Kueue's preemptor).

Victims are chosen by simulating their removal and restoring it: nothing is taken back unless
the request then fits, and every victim the request can do without is spared. Only work that
ran before the cycle may be preempted (all that ``ByCost`` holds while the cycle runs).
"""

from __future__ import annotations

import bisect
import enum
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import (
    WHOLE,
    Allocation,
    Placement,
    Preemption,
    PreemptionCode,
    Request,
    Reservation,
    Topology,
)
from scheduler.engine.placement import Shapes, choose_in, place
from scheduler.engine.quota import QuotaLedger


class Cause(enum.Enum):
    """What the victims of an admission make room for."""

    CAPACITY = "capacity"  # GPUs, on the nodes where the request then fits
    QUOTA = "quota"  # the quota of the request's queue (or organization)


class ByCost:
    """Running work per GPU model, cheapest to preempt first: lowest priority, then the most
    recently started, then the smallest, then by workload id; and the preemptible part of it
    alone, which is all that priority preemption looks at, also per queue (what preemption
    for quota looks at)."""

    def __init__(self, allocations: Iterable[Allocation]) -> None:
        # Sorted once each, rather than inserted one by one (a forecast starts from thousands).
        every: dict[str | None, list[Allocation]] = {}
        preemptible: dict[str | None, list[Allocation]] = {}
        preemptible_in: dict[tuple[str, str | None], list[Allocation]] = {}
        for allocation in allocations:
            model = allocation.gpu_model
            every.setdefault(model, []).append(allocation)
            if allocation.preemptible:
                preemptible.setdefault(model, []).append(allocation)
                preemptible_in.setdefault((allocation.queue, model), []).append(allocation)
        self._all = {model: _Sorted(group) for model, group in every.items()}
        self._preemptible = {model: _Sorted(group) for model, group in preemptible.items()}
        self._preemptible_in = {key: _Sorted(group) for key, group in preemptible_in.items()}

    def add(self, allocation: Allocation) -> None:
        model = allocation.gpu_model
        self._all.setdefault(model, _Sorted()).add(allocation)
        if allocation.preemptible:
            self._preemptible.setdefault(model, _Sorted()).add(allocation)
            self._preemptible_in.setdefault((allocation.queue, model), _Sorted()).add(allocation)

    def remove(self, allocation: Allocation) -> None:
        model = allocation.gpu_model
        self._all[model].remove(allocation)
        if allocation.preemptible:
            self._preemptible[model].remove(allocation)
            self._preemptible_in[(allocation.queue, model)].remove(allocation)

    def of(self, model: str) -> list[Allocation]:
        known = self._all.get(model)
        return known.allocations if known else []

    def preemptible_of(self, model: str) -> list[Allocation]:
        known = self._preemptible.get(model)
        return known.allocations if known else []

    def preemptible_in(self, queue: str, model: str) -> list[Allocation]:
        known = self._preemptible_in.get((queue, model))
        return known.allocations if known else []


class _Sorted:
    """Allocations in ``ByCost`` order, with their keys for bisection."""

    def __init__(self, allocations: Iterable[Allocation] = ()) -> None:
        ordered = sorted(((self._key(a), a) for a in allocations), key=_first)  # stable: as add
        self.keys: list[tuple[int, float, int, str]] = [key for key, _ in ordered]
        self.allocations: list[Allocation] = [a for _, a in ordered]

    @staticmethod
    def _key(a: Allocation) -> tuple[int, float, int, str]:
        return (a.priority, -a.started_at, a.gpu_milli, a.workload)

    def add(self, allocation: Allocation) -> None:
        key = self._key(allocation)
        at = bisect.bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.allocations.insert(at, allocation)

    def remove(self, allocation: Allocation) -> None:
        at = bisect.bisect_left(self.keys, self._key(allocation))
        while self.allocations[at] is not allocation:
            at += 1
        del self.keys[at]
        del self.allocations[at]


def _first(entry: tuple[tuple[int, float, int, str], Allocation]) -> tuple[int, float, int, str]:
    return entry[0]


def candidates(
    request: Request,
    model: str,
    ledger: QuotaLedger,
    running: ByCost,
    reservations: Sequence[Reservation],
) -> Iterator[Allocation]:
    """Who may lose GPUs for ``request``: lower-priority preemptible work; work of queues that
    borrow, when the request stays within its own nominal quota (reclaim); and preemptible work
    on capacity the request's reservation holds. Cheapest first: lowest priority, then the most
    recently started, then the smallest (the order ``running`` keeps)."""
    least = request.demand_on(request.least_nodes)  # preemption makes room for the minimum
    reclaiming = ledger.within_nominal(request.queue, model, least)
    owns_window = any(
        r.id == request.reservation and r.queue == request.queue for r in reservations
    )
    if not reclaiming and not owns_window:
        for allocation in running.preemptible_of(model):
            if allocation.priority >= request.priority:
                return  # by priority from here on: nobody else is lower
            if allocation.workload != request.id:
                yield allocation
        return
    borrows: dict[str, bool] = {}  # by queue: the ledger does not move while we look
    for allocation in running.of(model):
        if allocation.workload == request.id:
            continue
        if allocation.priority < request.priority and allocation.preemptible:
            yield allocation
            continue
        queue = allocation.queue
        if queue == request.queue:
            continue
        if reclaiming:
            borrower = borrows.get(queue)
            if borrower is None:
                borrower = borrows[queue] = ledger.borrowing(queue, model) > 0
            if borrower:
                yield allocation
                continue
        if owns_window and allocation.preemptible:
            yield allocation  # evictable


def for_capacity(
    request: Request,
    model: str,
    capacity: Capacity,
    ledger: QuotaLedger,
    running: ByCost,
    reservations: Sequence[Reservation],
    shapes: Shapes,
) -> tuple[tuple[Placement, ...], list[Allocation]] | None:
    """The smallest set of victims whose removal lets the request fit, and where it then lands,
    with their capacity given back; or None (then nobody is touched: preempting what would not
    make it fit is never done).

    Candidates are given back cheapest first until the request fits; then every victim the
    placement can do without is spared, most valuable first. Victims are weighed on a
    ``_Room`` (only their nodes change), and placement runs once on the capacity they leave:
    whether a request fits is what ``place`` decides, not where."""
    if request.nodes != 1 and request.topology is Topology.SINGLE_NODE:
        return None
    victims = candidates(request, model, ledger, running, reservations)
    first = next(victims, None)
    if first is None:
        return None  # often so: the nodes are weighed only when someone could make room
    room = _Room(capacity, request, model)
    removed: list[Allocation] = []
    for victim in chain((first,), victims):
        removed.append(victim)
        if room.give(victim):
            break
    else:
        return None
    # Only victims on nodes where the request now fits matter: sparing any other changes
    # nothing (taking work back never makes a node fit).
    pool = {v.workload: v for name in room.fitting for v in room.given_on.get(name, ())}
    needed: set[str] = set()  # ids are unique among running work
    for victim in sorted(pool.values(), key=lambda a: (-a.priority, a.started_at, a.workload)):
        room.shift(victim, -1)
        if not room.fits():
            room.shift(victim, +1)
            needed.add(victim.workload)
    removed = [victim for victim in removed if victim.workload in needed]
    for victim in removed:
        capacity.give(victim)
    placements = place(capacity, request, model, shapes)
    if placements is None:  # the room and placement disagree on what fits: touch nobody
        for victim in removed:
            capacity.take(victim)
        return None
    return placements, removed


def for_quota(
    request: Request, model: str, ledger: QuotaLedger, running: ByCost
) -> list[Allocation] | None:
    """The victims whose quota the request takes when its queue's (or its organization's)
    quota of ``model`` keeps it out (Kueue's ``withinClusterQueue: LowerPriority``), or None
    when even all of them would not free enough. The ledger is left as it was found.

    Victims are the queue's own lower-priority preemptible work of ``model``, taken cheapest
    first until the quota admits the request's minimum; then any the quota can do without is
    spared, most valuable first."""
    least = request.demand_on(request.least_nodes)
    queue, organization = request.queue, request.organization
    # Victims leave the ledger as they are taken (their queue's usage and their
    # organization's), and come back when spared.
    victims: list[Allocation] = []
    admitted = False
    for victim in running.preemptible_in(queue, model):
        if victim.priority >= request.priority:
            break  # by priority from here on: nobody else is lower
        if victim.workload == request.id:
            continue
        victims.append(victim)
        ledger.remove(victim)
        if ledger.check(queue, model, least, organization) is None:
            admitted = True
            break
    if not admitted:
        for victim in victims:
            ledger.add(victim)
        return None
    needed: list[Allocation] = []
    for victim in reversed(victims):
        ledger.add(victim)
        if ledger.check(queue, model, least, organization) is None:
            continue  # spared
        ledger.remove(victim)
        needed.append(victim)
    for victim in needed:
        ledger.add(victim)
    return needed[::-1]


def preemption_of(victim: Allocation, request: Request, cause: Cause) -> Preemption:
    """``victim`` taken back for ``request``, with why."""
    if cause is Cause.QUOTA:
        return Preemption(
            victim.workload,
            request.id,
            PreemptionCode.QUOTA,
            f"quota of queue {request.queue}: preempted by higher-priority work of the same queue",
        )
    if victim.priority < request.priority and victim.preemptible:
        return Preemption(
            victim.workload,
            request.id,
            PreemptionCode.PRIORITY,
            f"priority: {request.id} (priority {request.priority}) needs its GPUs",
        )
    if request.reservation is not None:
        return Preemption(
            victim.workload,
            request.id,
            PreemptionCode.RESERVATION,
            f"reservation {request.reservation} opened for {request.queue}",
        )
    return Preemption(
        victim.workload,
        request.id,
        PreemptionCode.RECLAIM,
        f"reclaim: queue {request.queue} takes back its nominal quota",
    )


class _Room:
    """The nodes of ``model`` where a request fits, as preemption gives victims back (or takes
    them again) on a copy of their nodes' free figures; the cluster's ``Capacity`` is not
    touched. Fits as ``place`` would find: one node, or enough nodes for a gang (in one rack
    for ``same_rack``)."""

    def __init__(self, capacity: Capacity, request: Request, model: str) -> None:
        self.capacity, self.request, self.model = capacity, request, model
        self.cpu, self.memory = request.cpu_milli, request.memory_mib
        self.whole = 0 if request.fractional else request.gpus_per_node
        # Per node given back on: [free milli-GPU per GPU, free CPU, free memory, the node
        # when the request may land on it, else None].
        self.free: dict[str, list[Any]] = {}
        self.given_on: dict[str, list[Allocation]] = {}
        self.fitting: set[str] = set()
        self.per_rack: Counter[str] = Counter()
        if request.nodes > 1:  # a single node does not fit anywhere yet: ``place`` said so
            for state_id, names in capacity.classes(model):
                if choose_in(capacity.states[state_id][0], capacity.nodes[names[0]], request):
                    for name in names:
                        if (
                            capacity.cpu_free[name] >= self.cpu
                            and capacity.memory_free[name] >= self.memory
                        ):
                            self._fit(name, True)

    def _fit(self, name: str, fits: bool) -> None:
        rack = self.capacity.nodes[name].rack
        if fits:
            self.fitting.add(name)
            self.per_rack[rack] += 1
        else:
            self.fitting.discard(name)
            self.per_rack[rack] -= 1

    def give(self, victim: Allocation) -> bool:
        """Give ``victim`` back; whether the request fits now."""
        self.shift(victim, +1)
        for placement in victim.placements:
            self.given_on.setdefault(placement.node, []).append(victim)
        return self.fits()

    def shift(self, allocation: Allocation, sign: int) -> None:
        """Give ``allocation`` back (+1) or take it again (-1)."""
        capacity, room = self.capacity, self.free
        for placement in allocation.placements:
            name = placement.node
            figures = room.get(name)
            if figures is None:
                node = capacity.nodes.get(name)
                if node is None:
                    continue
                lands = node.schedulable and node.gpu_model == self.model
                figures = room[name] = [
                    list(capacity.gpu_free[name]),
                    capacity.cpu_free[name],
                    capacity.memory_free[name],
                    node if lands else None,
                ]
            free = figures[0]
            milli = sign * placement.gpu_milli
            for index in placement.gpus:
                free[index] += milli
            figures[1] += sign * placement.cpu_milli
            figures[2] += sign * placement.memory_mib
            host = figures[3]
            if host is not None:
                fits = (
                    figures[1] >= self.cpu
                    and figures[2] >= self.memory
                    and free.count(WHOLE) >= self.whole
                    and choose_in(free, host, self.request) is not None
                )
                if fits != (name in self.fitting):
                    self._fit(name, fits)

    def fits(self) -> bool:
        request = self.request
        if request.nodes == 1:
            return bool(self.fitting)
        wanted = request.least_nodes
        if request.topology is Topology.SAME_RACK:
            return any(count >= wanted for count in self.per_rack.values())
        return len(self.fitting) >= wanted
