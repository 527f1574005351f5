"""Head-of-line holds and backfill: a workload that waits for capacity holds back later ones
that want the same GPU models, unless they end (by their runtime estimate) before it could
start. When it could start is the runtime rule: running work given back in the order it is
estimated to end, until the workload fits."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from scheduler.engine import reasons
from scheduler.engine.capacity import Capacity
from scheduler.engine.model import Allocation, PendingReason, Request, Topology
from scheduler.engine.placement import Shapes, place
from scheduler.engine.ranked import Ranked
from scheduler.engine.room import Room


@dataclass
class _Blocker:
    """A workload that waits for capacity, when it could start by runtime estimates, and the
    reason of those it holds back (one value for all of them)."""

    workload: Request
    models: frozenset[str]
    earliest_start: float
    holds_back: PendingReason


class HeadOfLine:
    """The workloads of one cycle that wait for capacity, in the order the cycle met them, and
    whom they hold back: later work of no higher priority wanting one of the same models,
    unless backfill lets it run because it ends (by its estimate) before the blocker could
    start. And those that wait for their queue's quota: they hold back the lower-priority work
    of their queue that wants one of the same models."""

    def __init__(self, now: float, backfill: bool) -> None:
        self.now, self.backfill = now, backfill
        self._blockers: list[_Blocker] = []
        # Who holds back requests alike (models, priority, runtime estimate), until the next
        # blocker joins: most of a long queue waits behind the same few.
        self._held_back: dict[tuple[object, ...], _Blocker | None] = {}
        # The soonest start among the blockers of each (models, priority).
        self._soonest: dict[tuple[frozenset[str], int], float] = {}
        # By queue: the work that waits for the queue's quota, with its models and the reason
        # of those it holds back; none is covered by an earlier one (see ``waits_for_quota``).
        self._quota: dict[str, list[tuple[Request, frozenset[str], PendingReason]]] = {}

    def holding_back(self, request: Request, models: frozenset[str]) -> PendingReason | None:
        """Why ``request`` (which may take ``models``) waits behind a blocker, or None."""
        for first, wanted, reason in self._quota.get(request.queue, ()):
            if first.priority > request.priority and not wanted.isdisjoint(models):
                return reason
        if not self._blockers:
            return None
        alike = (request.gpu_models, request.priority, request.runtime_estimate_s)
        if alike in self._held_back:
            blocker = self._held_back[alike]
        else:
            blocker = self._held_back[alike] = self._blocked_by(request, models)
        return None if blocker is None else blocker.holds_back

    def _blocked_by(self, request: Request, models: frozenset[str]) -> _Blocker | None:
        for blocker in self._blockers:
            if blocker.workload.priority < request.priority or blocker.models.isdisjoint(models):
                continue
            fits_before = (
                self.backfill
                and request.runtime_estimate_s is not None
                and self.now + request.runtime_estimate_s <= blocker.earliest_start
            )
            if not fits_before:
                return blocker
        return None

    def waits_for_quota(self, request: Request, models: frozenset[str]) -> None:
        """``request`` waits for its queue's quota: lower-priority work of its queue that wants
        one of the same models waits behind it, rather than take that quota bit by bit (small
        work would keep larger work of higher priority out of its own queue's quota). Work
        of the same priority is not held. A request covered by an earlier one (no lower
        priority, all of its models) adds nobody."""
        held = self._quota.setdefault(request.queue, [])
        if not any(models <= known and b.priority >= request.priority for b, known, _ in held):
            held.append((request, models, reasons.behind_for_quota(request)))

    def waits(self, request: Request, models: frozenset[str], earliest_start: float) -> None:
        """``request`` waits for capacity it could have at ``earliest_start``: it holds back
        the work after it.

        Unless an earlier blocker already holds back all it would: one of no lower priority,
        wanting all of its models, that could start no later. That blocker comes first in
        ``_blocked_by``, so leaving the request out changes nobody's decision nor reason, and
        keeps the blockers few (without it, a cycle is quadratic in its waiting work)."""
        priority = request.priority
        for (known, above), soonest in self._soonest.items():
            if above >= priority and models <= known and soonest <= earliest_start:
                return
        self._blockers.append(_Blocker(request, models, earliest_start, reasons.behind(request)))
        key = (models, priority)
        self._soonest[key] = min(self._soonest.get(key, earliest_start), earliest_start)
        self._held_back.clear()


class Ending:
    """Running work with an estimated end, soonest first (then by workload id)."""

    def __init__(self, allocations: Iterable[Allocation]) -> None:
        self._ranked = Ranked(
            ((a.ends_at, a.workload), a) for a in allocations if a.ends_at is not None
        )

    def add(self, allocation: Allocation) -> None:
        if allocation.ends_at is not None:
            self._ranked.add((allocation.ends_at, allocation.workload), allocation)

    def remove(self, allocation: Allocation) -> None:
        if allocation.ends_at is not None:
            self._ranked.remove((allocation.ends_at, allocation.workload), allocation)

    def of(self, models: list[str]) -> Iterator[tuple[float, Allocation]]:
        for (ends_at, _), allocation in self._ranked.entries():
            if allocation.gpu_model in models:
                yield ends_at, allocation


def fits(capacity: Capacity, request: Request, models: list[str], shapes: Shapes) -> bool:
    """Whether the request fits ``capacity`` on one of ``models``."""
    return any(place(capacity, request, model, shapes) is not None for model in models)


def earliest_start(
    capacity: Capacity,
    ending: Iterable[tuple[float, Allocation]],
    request: Request,
    models: list[str],
    shapes: Shapes,
) -> float:
    """When the request could start if running work ends as estimated (inf: unknown): the
    ``ending`` work (soonest first) given back until it fits.

    Given back on a ``Room`` per model (a copy of the nodes it sits on), not on ``capacity``:
    whether a request fits depends only on which nodes could hold its share of one node, and
    giving back changes only the nodes given back to."""
    if fits(capacity, request, models, shapes):
        return next((ends_at for ends_at, _ in ending), float("inf"))
    if request.nodes != 1 and request.topology is Topology.SINGLE_NODE:
        return float("inf")  # it never fits
    rooms = [Room(capacity, request, model) for model in models]
    for ends_at, allocation in ending:
        for room in rooms:
            room.shift(allocation, +1)
        if any(room.fits() for room in rooms):
            return ends_at
    return float("inf")
