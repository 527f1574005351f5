"""Free capacity of a cluster during one cycle: what the snapshot's allocations leave, updated
as the cycle grants, preempts and tries placements.

Besides the free figures per node, ``Capacity`` keeps nodes grouped by state: schedulable
nodes of one GPU model whose GPUs are free alike (same free milli-GPU per GPU, same NVLink
domains, same shareability) are one *class*. Placement then weighs a class once instead of
each of its nodes: the cost of a placement depends on nothing else but the node's name, which
only breaks ties. The groups are kept up to date by ``take`` and ``give``, the only ways the
free figures may change.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from itertools import chain

from scheduler.engine.model import WHOLE, Allocation, Node, Snapshot

# The GPU state of a node: free milli-GPU per GPU, NVLink domain per GPU, shareable.
State = tuple[tuple[int, ...], tuple[int, ...], bool]
# What placement makes of one state for one kind of request: the GPUs it would take, the
# growth of fragmentation, the milli-GPU left free; None when the request does not fit.
Choice = tuple[tuple[int, ...], float, int] | None
_NONE: dict[int, list[str]] = {}  # the classes of a model the cluster lacks


class Capacity:
    """Per node: free milli-GPU of each GPU, free CPU and memory."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[str, Node] = {node.name: node for node in snapshot.nodes}
        self.gpu_free: dict[str, list[int]] = {
            node.name: [WHOLE] * node.gpu_count for node in snapshot.nodes
        }
        self.cpu_free: dict[str, int] = {node.name: node.cpu_milli for node in snapshot.nodes}
        self.memory_free: dict[str, int] = {node.name: node.memory_mib for node in snapshot.nodes}
        for allocation in snapshot.allocations:
            self._apply(allocation, -1, reindex=False)
        self._build_index()

    def copy(self, models: Collection[str], *, give: Iterable[Allocation] = ()) -> Capacity:
        """The free figures of the nodes of ``models`` as they are now, with ``give`` given back
        (on those nodes)."""
        copied = Capacity(Snapshot(()))  # (compiled, a class is made only through __init__)
        copied.nodes = {n: node for n, node in self.nodes.items() if node.gpu_model in models}
        copied.gpu_free = {n: list(self.gpu_free[n]) for n in copied.nodes}
        copied.cpu_free = {n: self.cpu_free[n] for n in copied.nodes}
        copied.memory_free = {n: self.memory_free[n] for n in copied.nodes}
        for allocation in give:
            copied._apply(allocation, +1, reindex=False)
        copied._build_index()
        return copied

    def _build_index(self) -> None:
        # States are interned: a class is known by a small integer, cheap to hash.
        self._state_ids: dict[State, int] = {}
        self.states: list[State] = []
        self._state_of: dict[str, int] = {}
        # GPU model -> state id -> names of the schedulable nodes in that state, sorted.
        self._classes: dict[str | None, dict[int, list[str]]] = {}
        self._whole: dict[str | None, int] = {}  # whole free GPUs of schedulable nodes, by model
        self.version = 0  # moves on every change of the free figures
        # Placement's memo: (kind of request, typical shapes) -> state id -> choice.
        self.choices: dict[tuple[object, ...], dict[int, Choice]] = {}
        for name, node in self.nodes.items():
            if node.schedulable:
                self._index(name, node)

    def take(self, allocation: Allocation) -> None:
        self._apply(allocation, -1)

    def give(self, allocation: Allocation) -> None:
        self._apply(allocation, +1)

    def _apply(self, allocation: Allocation, sign: int, *, reindex: bool = True) -> None:
        for placement in allocation.placements:
            name = placement.node
            node = self.nodes.get(name)
            if node is None:
                continue  # a node gone from the snapshot: nothing to account for
            if reindex and node.schedulable:
                self._unindex(name, node)
            free = self.gpu_free[name]
            for index in placement.gpus:
                free[index] += sign * placement.gpu_milli
            self.cpu_free[name] += sign * placement.cpu_milli
            self.memory_free[name] += sign * placement.memory_mib
            if reindex and node.schedulable:
                self._index(name, node)
        if reindex:
            self.version += 1

    def _index(self, name: str, node: Node) -> None:
        free = self.gpu_free[name]
        state = (tuple(free), node.gpu_domains, node.shareable)
        state_id = self._state_ids.get(state)
        if state_id is None:
            state_id = self._state_ids[state] = len(self.states)
            self.states.append(state)
        self._state_of[name] = state_id
        members = self._classes.setdefault(node.gpu_model, {}).setdefault(state_id, [])
        bisect.insort(members, name)
        self._whole[node.gpu_model] = self._whole.get(node.gpu_model, 0) + free.count(WHOLE)

    def _unindex(self, name: str, node: Node) -> None:
        classes = self._classes[node.gpu_model]
        state_id = self._state_of.pop(name)
        members = classes[state_id]
        del members[bisect.bisect_left(members, name)]
        if not members:
            del classes[state_id]
        self._whole[node.gpu_model] -= self.gpu_free[name].count(WHOLE)

    def classes(self, model: str | None) -> Iterable[tuple[int, list[str]]]:
        """(state id, names sorted) of the schedulable nodes of ``model`` (None: any model),
        grouped by GPU state; ``states[state id]`` is the state. Not to be held across a
        ``take`` or ``give``. A model's classes are a view of the index (placement's hot loop
        iterates it)."""
        if model is not None:
            return self._classes.get(model, _NONE).items()
        return chain.from_iterable(classes.items() for classes in self._classes.values())

    def whole_free(self, node: str) -> list[int]:
        """Indexes of the node's GPUs nobody uses."""
        return [i for i, free in enumerate(self.gpu_free[node]) if free == WHOLE]

    def free_gpus_of(self, models: Iterable[str] | None) -> int:
        """Whole free GPUs on schedulable nodes of these models (None: any model)."""
        if models is None:
            return sum(self._whole.values())
        return sum(self._whole.get(model, 0) for model in set(models))
