"""Free capacity against schedulable capacity: for a shape of whole GPUs, how many copies could
start now on a cluster's schedulable nodes, and how many its free GPUs would hold if they were
together. The difference is what fragmentation costs that shape.

A copy of a shape of ``g`` GPUs per node on ``k`` nodes needs ``g`` whole free GPUs on each of
``k`` distinct nodes, in any NVLink domain and rack: what placement asks of a request of
``any`` topology without CPU or memory (the typical shapes name neither).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import WHOLE, Value


@dataclass(frozen=True, slots=True)
class Shape(Value):
    """``gpus`` whole GPUs on each of ``nodes`` nodes (more than one: a gang)."""

    gpus: int
    nodes: int = 1

    @property
    def size(self) -> int:
        return self.gpus * self.nodes

    @property
    def label(self) -> str:
        return str(self.gpus) if self.nodes == 1 else f"{self.nodes}x{self.gpus}"


# The shapes the fleet is usually asked for: single nodes of 1 to 8 GPUs, gangs of full nodes.
TYPICAL_SHAPES: Final[tuple[Shape, ...]] = (
    Shape(1),
    Shape(2),
    Shape(4),
    Shape(8),
    Shape(8, nodes=2),
    Shape(8, nodes=4),
)


@dataclass(frozen=True, slots=True)
class ShapeFit(Value):
    """One shape on one GPU model: copies that could start now against copies the free GPUs
    would hold together, and the free GPUs no copy can use."""

    shape: Shape
    startable: int
    would_hold: int
    free: int

    @property
    def stranded(self) -> int:
        """Free but unschedulable GPUs for this shape."""
        return self.free - self.startable * self.shape.size


def free_whole_by_node(capacity: Capacity, model: str | None) -> list[int]:
    """Whole free GPUs of each schedulable node of ``model``, as placement counts them."""
    free: list[int] = []
    for state_id, members in capacity.classes(model):
        free.extend([capacity.states[state_id][0].count(WHOLE)] * len(members))
    return free


def startable(free_by_node: Sequence[int], shape: Shape) -> int:
    """The most copies of ``shape`` that fit at once: each node serves ``free // gpus`` node
    parts, and a copy takes its ``nodes`` parts from distinct nodes. ``m`` copies fit exactly
    when the nodes, each giving at most ``m`` parts, give ``m * nodes`` of them."""
    parts = [free // shape.gpus for free in free_by_node]
    most = sum(parts) // shape.nodes
    while most > 0 and sum(min(p, most) for p in parts) < most * shape.nodes:
        most -= 1
    return most


def shape_fits(
    free_by_node: Sequence[int], shapes: Sequence[Shape] = TYPICAL_SHAPES
) -> list[ShapeFit]:
    """Each shape on nodes with these whole free GPUs."""
    free = sum(free_by_node)
    return [
        ShapeFit(
            shape=shape,
            startable=startable(free_by_node, shape),
            would_hold=free // shape.size,
            free=free,
        )
        for shape in shapes
    ]
