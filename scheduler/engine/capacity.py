"""Free capacity of a cluster during one cycle: what the snapshot's allocations leave, updated
as the cycle grants, preempts and tries placements.

Besides the free figures per node (one ``Free`` record each), ``Capacity`` keeps nodes grouped
by state: schedulable nodes of one GPU model whose GPUs are free alike (same free milli-GPU
per GPU, same NVLink domains, same shareability) are one *class*. Placement then weighs a class
once instead of each of its nodes: the cost of a placement depends on nothing else but the
node's name, which only breaks ties. The groups are kept up to date by ``take`` and ``give``,
the only ways the free figures may change.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from itertools import chain
from operator import attrgetter
from typing import Final

from scheduler.engine.model import WHOLE, Allocation, Node, Snapshot

# The GPU state of a node: free milli-GPU per GPU, NVLink domain per GPU, shareable.
State = tuple[tuple[int, ...], tuple[int, ...], bool]
# What placement makes of one state for one kind of request: the GPUs it would take, the
# growth of fragmentation, the milli-GPU left free; None when the request does not fit.
Choice = tuple[tuple[int, ...], float, int] | None


class Free:
    """One node's free figures: milli-GPU of each GPU, CPU and memory. One record per node,
    so the hot loops read a node's figures without looking its name up again."""

    def __init__(self, node: Node, gpus: list[int], cpu: int, memory: int) -> None:
        self.node, self.name = node, node.name
        self.gpus, self.cpu, self.memory = gpus, cpu, memory
        self.state = -1  # its GPU state's id while indexed (schedulable nodes)
        self.kind = -1  # the id of its (NVLink domains, shareable), fixed
        self.group: _Group | None = None  # its model's classes, while indexed

    def copy(self) -> Free:
        """The same figures, to change apart (not indexed)."""
        return Free(self.node, list(self.gpus), self.cpu, self.memory)


class _Group:
    """A GPU model's schedulable nodes by GPU state (state id -> records sorted by name), the
    same by how many whole GPUs a node of the state has free, and how many the nodes have."""

    def __init__(self) -> None:
        self.classes: dict[int, list[Free]] = {}
        self.by_whole: dict[int, dict[int, list[Free]]] = {}
        self.whole = 0


_NONE: Final = _Group()  # the classes of a model the cluster lacks
_by_name: Final = attrgetter("name")


class Capacity:
    """Per node: free milli-GPU of each GPU, free CPU and memory (``free``, by node name)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[str, Node] = {node.name: node for node in snapshot.nodes}
        self.free: dict[str, Free] = {
            node.name: Free(node, [WHOLE] * node.gpu_count, node.cpu_milli, node.memory_mib)
            for node in snapshot.nodes
        }
        for allocation in snapshot.allocations:
            self._apply(allocation, -1, reindex=False)
        self._build_index()

    def copy(self, models: Collection[str], *, give: Iterable[Allocation] = ()) -> Capacity:
        """The free figures of the nodes of ``models`` as they are now, with ``give`` given back
        (on those nodes)."""
        copied = Capacity(Snapshot(()))  # (compiled, a class is made only through __init__)
        copied.nodes = {n: node for n, node in self.nodes.items() if node.gpu_model in models}
        copied.free = {n: f.copy() for n, f in self.free.items() if n in copied.nodes}
        for allocation in give:
            copied._apply(allocation, +1, reindex=False)
        copied._build_index()
        return copied

    def _build_index(self) -> None:
        # States are interned: a class is known by a small integer, cheap to hash; so are a
        # node's NVLink domains and shareability, which make a state with its free shares.
        self._state_ids: dict[tuple[tuple[int, ...], int], int] = {}
        self._kinds: dict[tuple[tuple[int, ...], bool], int] = {}
        self.states: list[State] = []
        self._groups: dict[str | None, _Group] = {}
        self.version = 0  # moves on every change of the free figures
        # Placement's memo: (kind of request, typical shapes) -> state id -> choice.
        self.choices: dict[tuple[object, ...], dict[int, Choice]] = {}
        for free in self.free.values():
            node = free.node
            shape = (node.gpu_domains, node.shareable)
            kind = self._kinds.get(shape)
            if kind is None:
                kind = self._kinds[shape] = len(self._kinds)
            free.kind = kind
            if node.schedulable:
                group = self._groups.get(node.gpu_model)
                if group is None:
                    group = self._groups[node.gpu_model] = _Group()
                free.group = group
                self._index(free, group)

    def take(self, allocation: Allocation) -> None:
        self._apply(allocation, -1)

    def give(self, allocation: Allocation) -> None:
        self._apply(allocation, +1)

    def _apply(self, allocation: Allocation, sign: int, *, reindex: bool = True) -> None:
        for placement in allocation.placements:
            free = self.free.get(placement.node)
            if free is None:
                continue  # a node gone from the snapshot: nothing to account for
            group = free.group if reindex else None
            if group is not None:
                self._unindex(free, group)
            gpus = free.gpus
            for index in placement.gpus:
                gpus[index] += sign * placement.gpu_milli
            free.cpu += sign * placement.cpu_milli
            free.memory += sign * placement.memory_mib
            if group is not None:
                self._index(free, group)
        if reindex:
            self.version += 1

    def _index(self, free: Free, group: _Group) -> None:
        shares = tuple(free.gpus)
        key = (shares, free.kind)
        state_id = self._state_ids.get(key)
        if state_id is None:
            state_id = self._state_ids[key] = len(self.states)
            self.states.append((shares, free.node.gpu_domains, free.node.shareable))
        free.state = state_id
        whole = shares.count(WHOLE)
        members = group.classes.get(state_id)
        if members is None:
            group.classes[state_id] = members = [free]
            bucket = group.by_whole.get(whole)
            if bucket is None:
                bucket = group.by_whole[whole] = {}
            bucket[state_id] = members
        else:
            bisect.insort(members, free, key=_by_name)
        group.whole += whole

    def _unindex(self, free: Free, group: _Group) -> None:
        members = group.classes[free.state]
        whole = free.gpus.count(WHOLE)
        if len(members) == 1:
            del group.classes[free.state]
            del group.by_whole[whole][free.state]
        else:
            del members[bisect.bisect_left(members, free.name, key=_by_name)]
        group.whole -= whole

    def classes(self, model: str | None) -> Iterable[tuple[int, list[Free]]]:
        """(state id, the nodes' records sorted by name) of the schedulable nodes of ``model``
        (None: any model), grouped by GPU state; ``states[state id]`` is the state. Not to be
        held across a ``take`` or ``give``. A model's classes are a view of the index
        (placement's hot loop iterates it)."""
        if model is not None:
            return self._groups.get(model, _NONE).classes.items()
        return chain.from_iterable(group.classes.items() for group in self._groups.values())

    def classes_with(self, model: str | None, whole: int) -> Iterable[tuple[int, list[Free]]]:
        """``classes(model)`` of the states with at least ``whole`` whole GPUs free on a node
        (in no particular order): where a request for that many whole GPUs per node may fit."""
        groups = self._groups.values() if model is None else (self._groups.get(model, _NONE),)
        return chain.from_iterable(
            bucket.items()
            for group in groups
            for count, bucket in group.by_whole.items()
            if count >= whole
        )

    def whole_free(self, node: str) -> list[int]:
        """Indexes of the node's GPUs nobody uses."""
        return [i for i, free in enumerate(self.free[node].gpus) if free == WHOLE]

    def free_gpus_of(self, models: Iterable[str] | None) -> int:
        """Whole free GPUs on schedulable nodes of these models (None: any model)."""
        if models is None:
            return sum(group.whole for group in self._groups.values())
        return sum(self._groups.get(model, _NONE).whole for model in set(models))
