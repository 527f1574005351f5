"""CPU-aware single-node placement against its definition, node by node.

``place`` weighs one node per GPU state and CPU bucket; whatever it skips, the node it picks
must be the one with the least (growth of fragmentation, growth for the next task of each
shape, GPU left free, name) over every node the request fits, computed here the long way."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import WHOLE, Allocation, Node, Placement, Request, Snapshot
from scheduler.engine.placement import (
    Shapes,
    _next_task_fragmentation,
    choose_gpus,
    fragmentation,
    place,
)
from tests.strategies import SETTINGS

SHAPES: Shapes = {
    (1, WHOLE, 1, 8_000): 4.0,
    (1, 500, 1, 4_000): 2.0,
    (1, 250, 1, 2_000): 1.0,
    (2, WHOLE, 1, 16_000): 1.0,
    (4, WHOLE, 1, 30_000): 0.5,
}


@st.composite
def fleets(draw: st.DrawFn) -> Capacity:
    """A few nodes, several alike, partly used by small allocations."""
    count = draw(st.integers(2, 7))
    nodes = tuple(
        Node(
            name=f"n{i}",
            gpu_model="t4",
            gpu_domains=tuple(range(draw(st.sampled_from([2, 4])))),
            cpu_milli=draw(st.sampled_from([16_000, 32_000, 48_000])),
            memory_mib=65_536,
            shareable=True,
        )
        for i in range(count)
    )
    capacity = Capacity(Snapshot(nodes))
    for index in range(draw(st.integers(0, 10))):
        node = nodes[draw(st.integers(0, count - 1))]
        milli = draw(st.sampled_from([250, 500, WHOLE]))
        cpu = draw(st.sampled_from([2_000, 4_000, 8_000]))
        request = Request(id=f"a{index}", queue="q", gpu_milli=milli, cpu_milli=cpu)
        gpus = choose_gpus(capacity, node, request)
        if gpus is None or capacity.free[node.name].cpu < cpu:
            continue
        placement = Placement(node.name, gpus, milli, cpu, 1_024)
        capacity.take(Allocation(request.id, "q", None, (placement,)))
    return capacity


def _by_definition(capacity: Capacity, request: Request) -> tuple[str, tuple[int, ...]] | None:
    best = None
    for name, node in sorted(capacity.nodes.items()):
        have = capacity.free[name].cpu
        if have < request.cpu_milli or capacity.free[name].memory < request.memory_mib:
            continue
        gpus = choose_gpus(capacity, node, request)
        if gpus is None:
            continue
        free = list(capacity.free[name].gpus)
        after = list(free)
        for index in gpus:
            after[index] -= request.gpu_milli
        remains = have - request.cpu_milli
        key = (
            round(fragmentation(after, SHAPES, remains) - fragmentation(free, SHAPES, have), 6),
            round(
                _next_task_fragmentation(after, SHAPES, remains)
                - _next_task_fragmentation(free, SHAPES, have),
                6,
            ),
            sum(after),
            name,
        )
        if best is None or key < best[0]:
            best = (key, gpus)
    return None if best is None else (best[0][3], best[1])


@SETTINGS
@given(
    fleets(),
    st.sampled_from([(1, 250), (1, 500), (1, WHOLE), (2, WHOLE), (0, WHOLE)]),
    st.sampled_from([0, 2_000, 6_000, 12_000]),
)
def test_the_single_node_placement_is_the_cheapest_node_by_definition(
    capacity: Capacity, shape: tuple[int, int], cpu: int
) -> None:
    gpus, milli = shape
    request = Request(
        id="r", queue="q", gpus_per_node=gpus, gpu_milli=milli, cpu_milli=cpu, memory_mib=1_024
    )

    placements = place(capacity, request, "t4", SHAPES)

    expected = _by_definition(capacity, request)
    if expected is None:
        assert placements is None
    else:
        assert placements is not None
        assert [(p.node, p.gpus) for p in placements] == [expected]
