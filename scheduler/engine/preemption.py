"""Preemption: who may lose GPUs for a request, the fewest of them that make it fit (or free
its queue's quota), and why each goes (Kueue's preemptor).

Victims are chosen by simulating their removal and restoring it: nothing is taken back unless
the request then fits, and every victim the request can do without is spared. Only work that
ran before the cycle may be preempted (all that ``ByCost`` holds while the cycle runs).
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
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
        self._all: dict[str | None, _Sorted] = {}
        self._preemptible: dict[str | None, _Sorted] = {}
        self._preemptible_in: dict[tuple[str, str | None], _Sorted] = {}
        # Preemption's memo: the last walk of the candidates per kind of request (``_Walk``).
        self.walks: dict[tuple[object, ...], _Walk] = {}
        self.added = 0  # work added so far: a walk is taken up only while none came since
        for allocation in allocations:
            self.add(allocation)

    def add(self, allocation: Allocation) -> None:
        self.added += 1
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

    def holds(self, allocation: Allocation) -> bool:
        """Whether this very allocation is among the running work."""
        known = self._all.get(allocation.gpu_model)
        return known is not None and known.holds(allocation)

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

    def __init__(self) -> None:
        self.keys: list[tuple[int, float, int, str]] = []
        self.allocations: list[Allocation] = []

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

    def holds(self, allocation: Allocation) -> bool:
        key = self._key(allocation)
        at = bisect.bisect_left(self.keys, key)
        while at < len(self.keys) and self.keys[at] == key:
            if self.allocations[at] is allocation:
                return True
            at += 1
        return False


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
    walked = _walk(request, model, capacity, ledger, running, reservations)
    if walked is None:
        return None
    room, removed = walked
    # Only victims on nodes where the request now fits matter: sparing any other changes
    # nothing (taking work back never makes a node fit).
    pool = {v.workload: v for name in room.fitting for v in room.given_on.get(name, ())}
    needed: set[str] = set()  # ids are unique among running work
    for victim in sorted(pool.values(), key=lambda a: (-a.priority, a.started_at, a.workload)):
        room.shift(victim, -1)
        if not room.fits():
            room.shift(victim, +1)
            needed.add(victim.workload)
    for victim in pool.values():  # the room back as the walk left it, for the next walk
        if victim.workload not in needed:
            room.shift(victim, +1)
    removed = [victim for victim in removed if victim.workload in needed]
    for victim in removed:
        capacity.give(victim)
    placements = place(capacity, request, model, shapes)
    if placements is None:  # the room and placement disagree on what fits: touch nobody
        for victim in removed:
            capacity.take(victim)
        return None
    return placements, removed


def _walk(
    request: Request,
    model: str,
    capacity: Capacity,
    ledger: QuotaLedger,
    running: ByCost,
    reservations: Sequence[Reservation],
) -> tuple[_Room, list[Allocation]] | None:
    """The candidates given back cheapest first until the request fits: the room they leave
    and who they are; None when all of them would not make it fit.

    A single-node request takes up the last walk of requests alike (``_Walk``) where it
    stopped, when the candidates still start with what it gave back and no node fits there:
    the same room and victims as walking again from the first candidate, at the cost of
    reading the candidates and the nodes whose figures moved since."""
    kind = _kind(request, model, ledger)
    memo = running.walks.get(kind) if kind is not None else None
    resumed = None
    if memo is not None and memo.capacity is capacity and memo.added == running.added:
        resumed = memo.resume(candidates(request, model, ledger, running, reservations), running)
    if resumed is None:
        room, removed = _Room(capacity, request, model), []
        rest: Iterator[Allocation] = candidates(request, model, ledger, running, reservations)
    else:
        room, removed, rest = resumed
    fits = resumed is not None and room.fits()  # taken up where its last victim made it fit
    if not fits:
        for victim in rest:
            removed.append(victim)
            if room.give(victim):
                fits = True
                break
    if kind is not None:
        running.walks[kind] = _Walk(room, removed, capacity, capacity.version, running.added)
    return (room, removed) if fits else None


def _kind(request: Request, model: str, ledger: QuotaLedger) -> tuple[object, ...] | None:
    """Single-node requests alike, whose walks likely see the same candidates (``resume``
    checks that they do): what the room reads of them, and what ``candidates`` picks them
    by. None: a gang, never resumed."""
    if request.nodes != 1:
        return None
    one_domain = request.topology is Topology.SAME_NVLINK_DOMAIN
    reclaiming = ledger.within_nominal(request.queue, model, request.demand_on(1))
    return (
        model,
        request.priority,
        request.queue if reclaiming or request.reservation else None,
        request.reservation,
        request.gpu_milli,
        request.gpus_per_node,
        one_domain,
        request.cpu_milli,
        request.memory_mib,
    )


class _Walk:
    """A walk of the candidates for single-node requests of one kind, as it stopped: the
    room (with every victim given back), the victims in the order given, the version of the
    capacity the room's figures were read at, and how much work ``ByCost`` had had added
    (work added between cycles is the cheapest to preempt: a walk is taken up only within
    a cycle, where work only leaves)."""

    __slots__ = ("added", "capacity", "given", "room", "version")

    def __init__(
        self, room: _Room, given: list[Allocation], capacity: Capacity, version: int, added: int
    ) -> None:
        self.room, self.given, self.capacity, self.version = room, given, capacity, version
        self.added = added

    def resume(
        self, stream: Iterator[Allocation], running: ByCost
    ) -> tuple[_Room, list[Allocation], Iterator[Allocation]] | None:
        """The room, the victims and the candidates still to give back, as walking ``stream``
        (the candidates now) from its start would leave them once past the victims given; or
        None when they make it fit without a victim. A room where the request fits is a walk
        that stopped.

        The stream and the victims are both in ``ByCost`` order: a candidate that is new is
        given back where it comes, a victim no longer a candidate taken again, one no longer
        running forgotten. A room holds the same figures whatever the order its victims came
        back in, and giving back only makes more nodes fit: when the request fits nowhere
        once past them, it fitted nowhere before; when it fits, the nodes where it does are
        given their victims back one by one to see where the first starts to fit, and the
        victims after that taken again."""
        given, at, room = self.given, 0, self.room
        kept: list[Allocation] = []
        gone: list[Allocation] = []
        following: Allocation | None = None
        key = _Sorted._key
        for candidate in stream:
            while at < len(given) and given[at] is not candidate:
                if key(given[at]) > key(candidate):
                    break  # the candidate is new and comes first
                if running.holds(given[at]):
                    room.take_back(given[at])  # a candidate no more
                else:
                    gone.append(given[at])
                at += 1
            if at == len(given):
                following = candidate
                break
            if given[at] is candidate:
                at += 1
            else:
                room.insert(candidate)
            kept.append(candidate)
        for victim in given[at:]:
            if running.holds(victim):
                room.take_back(victim)
            else:
                gone.append(victim)
        room.refresh(self.version, gone)
        if room.fitting:  # the walk stops among them: where the first node starts to fit
            at = {id(victim): i for i, victim in enumerate(kept)}
            starts = [room.starts_to_fit(name) for name in list(room.fitting)]
            if not kept or None in starts:
                return None
            stop = min(at[id(victim)] for victim in starts if victim is not None)
            for victim in reversed(kept[stop + 1 :]):
                room.take_back(victim)
            return room, kept[: stop + 1], iter(())
        rest = stream if following is None else itertools.chain((following,), stream)
        return room, kept, rest


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
        room = self.free
        for placement in allocation.placements:
            name = placement.node
            figures = room.get(name)
            if figures is None:
                figures = self._read(name)
                if figures is None:
                    continue
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

    def _read(self, name: str) -> list[Any] | None:
        """The node's figures as the capacity has them (None: a node gone from it)."""
        capacity = self.capacity
        node = capacity.nodes.get(name)
        if node is None:
            return None
        host = node.schedulable and node.gpu_model == self.model
        figures = self.free[name] = [
            list(capacity.gpu_free[name]),
            capacity.cpu_free[name],
            capacity.memory_free[name],
            node if host else None,
        ]
        return figures

    def insert(self, victim: Allocation) -> None:
        """Give ``victim`` back among those given (each node's in ``ByCost`` order)."""
        self.give(victim)
        for name in {p.node for p in victim.placements}:
            self.given_on[name].sort(key=_Sorted._key)

    def take_back(self, victim: Allocation) -> None:
        """Take a victim given back again: it is a candidate no more."""
        self.shift(victim, -1)
        for name in {p.node for p in victim.placements}:
            left = [v for v in self.given_on.pop(name, ()) if v is not victim]
            if left:
                self.given_on[name] = left

    def refresh(self, version: int, gone: list[Allocation]) -> None:
        """The figures again after the capacity moved (since ``version``) and ``gone`` left
        the running work: each node that moved (or that they were on) read again from the
        capacity, with what is still given back on it given back again."""
        touched, gone_ids = self.capacity.touched, {id(victim) for victim in gone}
        stale = {name for name in self.free if touched.get(name, 0) > version}
        for victim in gone:
            stale.update(p.node for p in victim.placements if p.node in self.free)
        for name in stale:
            given = [v for v in self.given_on.pop(name, ()) if id(v) not in gone_ids]
            if given:
                self.given_on[name] = given
            self._replay(name)

    def starts_to_fit(self, name: str) -> Allocation | None:
        """The victim given back on the node with which the request starts to fit there
        (None: it fits with none)."""
        return self._replay(name)

    def _replay(self, name: str) -> Allocation | None:
        """The node read again from the capacity and its victims given back one by one, in
        order; the one with which the request starts to fit there, if it does."""
        del self.free[name]
        if name in self.fitting:
            self._fit(name, False)
        if self._read(name) is None:
            return None
        seen: set[int] = set()
        starts: Allocation | None = None
        fitted = name in self.fitting
        for victim in self.given_on.get(name, ()):
            if id(victim) in seen:
                continue
            seen.add(id(victim))
            self.shift(_on(victim, name), +1)
            if not fitted and name in self.fitting:
                starts, fitted = victim, True
        return starts

    def fits(self) -> bool:
        request = self.request
        if request.nodes == 1:
            return bool(self.fitting)
        wanted = request.least_nodes
        if request.topology is Topology.SAME_RACK:
            return any(count >= wanted for count in self.per_rack.values())
        return len(self.fitting) >= wanted


def _on(allocation: Allocation, node: str) -> Allocation:
    """The part of ``allocation`` on ``node``."""
    placements = tuple(p for p in allocation.placements if p.node == node)
    return replace(allocation, placements=placements)
