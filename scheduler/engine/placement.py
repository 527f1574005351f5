"""Where a workload goes: exact GPUs on exact nodes, chosen to keep the cluster able to serve
the shapes it is usually asked for.

Fragmentation, after Weng et al. (ATC'23, "fragmentation gradient descent"): for a node, the
free GPU capacity that the typical shapes cannot use, weighted by how often each shape is
asked for. Among the nodes a workload fits, the engine picks the one whose fragmentation grows
least; ties go to the node left fuller (packing), then to the name, so decisions are
deterministic. Plain first-fit and best-fit live in ``baselines`` for comparison.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import WHOLE, Node, Placement, Request, Topology

Shapes = Mapping[tuple[int, int, int], float]  # (GPUs per node, milli per GPU, nodes) -> weight


def fragmentation(free: Sequence[int], shapes: Shapes) -> float:
    """Expected milli-GPU of ``free`` that a typical workload could not use."""
    total_weight = sum(shapes.values())
    if not total_weight:
        return 0.0
    total_free = sum(free)
    expected = 0.0
    for (gpus, milli, _nodes), weight in shapes.items():
        if milli < WHOLE:  # a share of one GPU: slivers smaller than it are lost to it
            unusable = sum(f for f in free if f < milli)
        else:
            whole = sum(1 for f in free if f == WHOLE)
            unusable = total_free - (whole // max(gpus, 1)) * max(gpus, 1) * WHOLE
        expected += weight * unusable
    return expected / total_weight


def choose_gpus(capacity: Capacity, node: Node, request: Request) -> tuple[int, ...] | None:
    """The GPUs of ``node`` this request would take, or None when they are not there."""
    free = capacity.gpu_free[node.name]
    if request.fractional:
        if not node.shareable:
            return None
        fitting = [i for i, f in enumerate(free) if f >= request.gpu_milli]
        if not fitting:
            return None
        # Best fit: fill a GPU already shared before opening a whole one.
        return (min(fitting, key=lambda i: (free[i], i)),)
    wanted = request.gpus_per_node
    by_domain: dict[int, list[int]] = defaultdict(list)
    for index in capacity.whole_free(node.name):
        by_domain[node.gpu_domains[index]].append(index)
    # The tightest domain that holds the whole request keeps the larger domains whole.
    holding = sorted((len(g), d) for d, g in by_domain.items() if len(g) >= wanted)
    if holding:
        return tuple(by_domain[holding[0][1]][:wanted])
    if request.topology is Topology.SAME_NVLINK_DOMAIN:
        return None
    chosen: list[int] = []
    for _count, domain in sorted((len(g), d) for d, g in by_domain.items()):
        chosen.extend(by_domain[domain])
    return tuple(sorted(chosen[:wanted])) if len(chosen) >= wanted else None


def fits_node(capacity: Capacity, node: Node, request: Request, models: Sequence[str]) -> bool:
    return (
        node.schedulable
        and (not models or node.gpu_model in models)
        and capacity.cpu_free[node.name] >= request.cpu_milli
        and capacity.memory_free[node.name] >= request.memory_mib
    )


def _placement(node: Node, gpus: tuple[int, ...], request: Request) -> Placement:
    return Placement(
        node=node.name,
        gpus=gpus,
        gpu_milli=request.gpu_milli,
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )


def _cost(
    capacity: Capacity, node: Node, gpus: tuple[int, ...], request: Request, shapes: Shapes
) -> tuple[float, int, str]:
    before = capacity.gpu_free[node.name]
    after = list(before)
    for index in gpus:
        after[index] -= request.gpu_milli
    growth = fragmentation(after, shapes) - fragmentation(before, shapes)
    return (round(growth, 6), sum(after), node.name)


def place(
    capacity: Capacity, request: Request, model: str | None, shapes: Shapes
) -> tuple[Placement, ...] | None:
    """All the placements of the request on nodes of ``model`` (None: any model, single node
    only), or None when it does not fit now."""
    models = [model] if model is not None else []
    options = []
    for node in capacity.nodes.values():
        if not fits_node(capacity, node, request, models):
            continue
        gpus = choose_gpus(capacity, node, request)
        if gpus is not None:
            options.append((_cost(capacity, node, gpus, request, shapes), node, gpus))
    if request.nodes == 1:
        if not options:
            return None
        _, node, gpus = min(options, key=lambda option: option[0])
        return (_placement(node, gpus, request),)
    if request.topology is Topology.SINGLE_NODE:
        return None
    return _place_gang(options, request)


def _place_gang(
    options: list[tuple[tuple[float, int, str], Node, tuple[int, ...]]], request: Request
) -> tuple[Placement, ...] | None:
    """``request.nodes`` distinct nodes: in one rack when any rack can hold them all (the
    cheapest such rack), else across as few racks as possible (``same_rack``: never)."""
    by_rack: dict[str, list[tuple[tuple[float, int, str], Node, tuple[int, ...]]]] = defaultdict(
        list
    )
    for option in sorted(options, key=lambda o: o[0]):
        by_rack[option[1].rack].append(option)
    wanted = request.nodes
    whole_racks = [
        (sum(o[0][0] for o in rack_options[:wanted]), rack, rack_options[:wanted])
        for rack, rack_options in by_rack.items()
        if len(rack_options) >= wanted
    ]
    if whole_racks:
        _, _, chosen = min(whole_racks, key=lambda entry: (entry[0], entry[1]))
    elif request.topology is Topology.SAME_RACK:
        return None
    else:
        chosen = []
        for _, rack_options in sorted(by_rack.items(), key=lambda e: (-len(e[1]), e[0])):
            chosen.extend(rack_options[: wanted - len(chosen)])
            if len(chosen) == wanted:
                break
        if len(chosen) < wanted:
            return None
    return tuple(_placement(node, gpus, request) for _, node, gpus in chosen)
