"""Preemption: who may lose GPUs for a request, the fewest of them that make it fit (or free
its queue's quota), and why each goes (Kueue's preemptor).

Victims are chosen by simulating their removal and restoring it: nothing is taken back unless
the request then fits, and every victim the request can do without is spared. Only work that
ran before the cycle may be preempted (all that ``ByCost`` holds while the cycle runs).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Final

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import (
    Allocation,
    Placement,
    Preemption,
    PreemptionCode,
    Request,
    Reservation,
    Topology,
)
from scheduler.engine.placement import Shapes, place
from scheduler.engine.quota import QuotaLedger
from scheduler.engine.ranked import Ranked, by_key
from scheduler.engine.room import Room


class Cause(enum.Enum):
    """What the victims of an admission make room for."""

    CAPACITY = "capacity"  # GPUs, on the nodes where the request then fits
    QUOTA = "quota"  # the quota of the request's queue (or organization)


# Cost to preempt, cheapest first (see ``ByCost``).
Key = tuple[int, float, int, str]


def _key(a: Allocation) -> Key:
    return (a.priority, -a.started_at, a.gpu_milli, a.workload)


class ByCost:
    """Running work per GPU model, cheapest to preempt first: lowest priority, then the most
    recently started, then the smallest, then by workload id; and the preemptible part of it
    alone, which is all that priority preemption looks at, also per queue (what preemption
    for quota looks at)."""

    def __init__(self, allocations: Iterable[Allocation]) -> None:
        # Sorted once, rather than inserted one by one (a forecast starts from thousands): each
        # group below is then in order already.
        every: dict[str | None, list[tuple[Key, Allocation]]] = {}
        preemptible: dict[str | None, list[tuple[Key, Allocation]]] = {}
        preemptible_in: dict[tuple[str, str | None], list[tuple[Key, Allocation]]] = {}
        for entry in sorted(((_key(a), a) for a in allocations), key=by_key):
            allocation = entry[1]
            model = allocation.gpu_model
            every.setdefault(model, []).append(entry)
            if allocation.preemptible:
                preemptible.setdefault(model, []).append(entry)
                preemptible_in.setdefault((allocation.queue, model), []).append(entry)
        self._all = {model: Ranked(group) for model, group in every.items()}
        self._preemptible = {model: Ranked(group) for model, group in preemptible.items()}
        self._preemptible_in = {key: Ranked(group) for key, group in preemptible_in.items()}

    def add(self, allocation: Allocation) -> None:
        model, key = allocation.gpu_model, _key(allocation)
        self._all.setdefault(model, Ranked()).add(key, allocation)
        if allocation.preemptible:
            self._preemptible.setdefault(model, Ranked()).add(key, allocation)
            in_queue = self._preemptible_in.setdefault((allocation.queue, model), Ranked())
            in_queue.add(key, allocation)

    def remove(self, allocation: Allocation) -> None:
        model, key = allocation.gpu_model, _key(allocation)
        self._all[model].remove(key, allocation)
        if allocation.preemptible:
            self._preemptible[model].remove(key, allocation)
            self._preemptible_in[(allocation.queue, model)].remove(key, allocation)

    def of(self, model: str) -> Iterable[Allocation]:
        return self._all.get(model, _NOBODY)

    def preemptible_of(self, model: str) -> Iterable[Allocation]:
        return self._preemptible.get(model, _NOBODY)

    def preemptible_in(self, queue: str, model: str) -> Iterable[Allocation]:
        return self._preemptible_in.get((queue, model), _NOBODY)


_NOBODY: Final = Ranked()


def owns_window(
    request: Request, model: str, reservations: Sequence[Reservation], now: float
) -> bool:
    """Whether ``request`` is work on a reservation of ``model`` that its queue owns, and whose
    window is open at ``now``: only then does it evict others' preemptible work."""
    return any(
        r.id == request.reservation
        and r.queue == request.queue
        and r.gpu_model == model
        and r.starts_at <= now < r.ends_at
        for r in reservations
    )


def candidates(
    request: Request,
    model: str,
    ledger: QuotaLedger,
    running: ByCost,
    window: bool,
) -> Iterator[Allocation]:
    """Who may lose GPUs for ``request``: lower-priority preemptible work; work of queues that
    borrow, when the request stays within its own nominal quota (reclaim); and preemptible work
    of others, when the request owns an open ``window`` (``owns_window``). Cheapest first:
    lowest priority, then the most recently started, then the smallest (the order ``running``
    keeps)."""
    least = request.demand_on(request.least_nodes)  # preemption makes room for the minimum
    reclaiming = ledger.within_nominal(request.queue, model, least)
    if not reclaiming and not window:
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
        if window and allocation.preemptible:
            yield allocation  # evictable


def for_capacity(
    request: Request,
    model: str,
    capacity: Capacity,
    ledger: QuotaLedger,
    running: ByCost,
    reservations: Sequence[Reservation],
    shapes: Shapes,
    now: float,
) -> tuple[tuple[Placement, ...], list[Allocation]] | None:
    """The smallest set of victims whose removal lets the request fit, and where it then lands,
    with their capacity given back; or None (then nobody is touched: preempting what would not
    make it fit is never done).

    Candidates are given back cheapest first until the request fits; then every victim the
    placement can do without is spared, most valuable first. Victims are weighed on a
    ``Room`` (only their nodes change), and placement runs once on the capacity they leave:
    whether a request fits is what ``place`` decides, not where."""
    if request.nodes != 1 and request.topology is Topology.SINGLE_NODE:
        return None
    window = owns_window(request, model, reservations, now)
    victims = candidates(request, model, ledger, running, window)
    first = next(victims, None)
    if first is None:
        return None  # often so: the nodes are weighed only when someone could make room
    room = Room(capacity, request, model)
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


def preemption_of(
    victim: Allocation, request: Request, cause: Cause, *, window: bool
) -> Preemption:
    """``victim`` taken back for ``request``, with why: ``window`` when the request owns an
    open window on the model (``owns_window``), else a victim neither of lower priority nor
    preemptible by it was reclaimed."""
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
    if window and victim.preemptible:
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
