"""Where a request would fit as running work is given back, weighed on a copy of only the
nodes that work sits on: preemption gives victims back until the request fits, backfill gives
back the work that ends first until it does. The cluster's ``Capacity`` is never touched, so
nothing has to be taken again, and only the nodes given back to are weighed."""

from __future__ import annotations

from collections import Counter

from scheduler.engine.capacity import Capacity, Free
from scheduler.engine.model import WHOLE, Allocation, Request, Topology
from scheduler.engine.placement import choose_in


class Room:
    """The nodes of ``model`` where a request that does not fit now would fit, as running work
    is given back (or taken again) on a copy of their nodes' free figures. Fits as ``place``
    would find: one node, or enough nodes for a gang (in one rack for ``same_rack``)."""

    def __init__(self, capacity: Capacity, request: Request, model: str) -> None:
        self.capacity, self.request, self.model = capacity, request, model
        self.cpu, self.memory = request.cpu_milli, request.memory_mib
        self.whole = 0 if request.fractional else request.gpus_per_node
        # The free figures of each node given back on, copied.
        self.free: dict[str, Free] = {}
        self.given_on: dict[str, list[Allocation]] = {}
        self.fitting: set[str] = set()
        self.per_rack: Counter[str] = Counter()
        if request.nodes > 1:  # a single node does not fit anywhere yet: ``place`` said so
            for state_id, members in capacity.classes_with(model, self.whole):
                if choose_in(capacity.states[state_id][0], members[0].node, request):
                    for free in members:
                        if free.cpu >= self.cpu and free.memory >= self.memory:
                            self._fit(free.name, True)

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
                known = capacity.free.get(name)
                if known is None:
                    continue
                figures = room[name] = known.copy()
            free = figures.gpus
            milli = sign * placement.gpu_milli
            for index in placement.gpus:
                free[index] += milli
            figures.cpu += sign * placement.cpu_milli
            figures.memory += sign * placement.memory_mib
            host = figures.node
            if host.schedulable and host.gpu_model == self.model:
                fits = (
                    figures.cpu >= self.cpu
                    and figures.memory >= self.memory
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
