"""Free capacity of a cluster during one cycle: what the snapshot's allocations leave, updated
as the cycle grants, preempts and tries placements."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.engine.model import WHOLE, Allocation, Node, Snapshot


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
            self.take(allocation)

    def take(self, allocation: Allocation) -> None:
        self._apply(allocation, -1)

    def give(self, allocation: Allocation) -> None:
        self._apply(allocation, +1)

    def _apply(self, allocation: Allocation, sign: int) -> None:
        for placement in allocation.placements:
            if placement.node not in self.nodes:
                continue  # a node gone from the snapshot: nothing to account for
            free = self.gpu_free[placement.node]
            for index in placement.gpus:
                free[index] += sign * placement.gpu_milli
            self.cpu_free[placement.node] += sign * placement.cpu_milli
            self.memory_free[placement.node] += sign * placement.memory_mib

    def whole_free(self, node: str) -> list[int]:
        """Indexes of the node's GPUs nobody uses."""
        return [i for i, free in enumerate(self.gpu_free[node]) if free == WHOLE]

    def free_gpus_of(self, models: Iterable[str] | None) -> int:
        """Whole free GPUs on schedulable nodes of these models (None: any model)."""
        wanted = set(models) if models is not None else None
        return sum(
            len(self.whole_free(name))
            for name, node in self.nodes.items()
            if node.schedulable and (wanted is None or node.gpu_model in wanted)
        )
