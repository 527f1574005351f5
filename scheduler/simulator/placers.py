"""Where one workload goes, by policy: the engine's own placement and the baselines it is
measured against in the same run.

Every placer takes the same ``Capacity`` and picks GPUs within a node with the engine's
``choose_gpus``, so the policies differ only in the node they choose:

- ``default``: the engine's ``placement.place`` (fragmentation-aware, after FGD), with the
  typical shapes of the workload; models of a request tried in its order of preference, as
  the scheduling cycle does.
- ``random``: a node drawn uniformly among those the workload fits.
- ``first-fit``: the first node, in the node list's order, the workload fits.
- ``best-fit``: the node left with the least resources, as in the FGD study's baseline:
  ``0.5 * free CPU / max CPU + 0.5 * free GPU / max GPU`` after placing, lowest wins.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import Node, Placement, Request
from scheduler.engine.placement import Shapes, choose_gpus, place

Placer = Callable[[Capacity, Request], tuple[Placement, ...] | None]

POLICIES = ("random", "first-fit", "best-fit", "default")


def fits(capacity: Capacity, node: Node, request: Request) -> bool:
    """Model, CPU and memory: what a node must have before its GPUs are looked at."""
    free = capacity.free[node.name]
    return (
        node.schedulable
        and (not request.gpu_models or node.gpu_model in request.gpu_models)
        and free.cpu >= request.cpu_milli
        and free.memory >= request.memory_mib
        and sum(free.gpus) >= request.gpus_per_node * request.gpu_milli
    )


def _placement(node: Node, gpus: tuple[int, ...], request: Request) -> tuple[Placement, ...]:
    return (
        Placement(
            node=node.name,
            gpus=gpus,
            gpu_milli=request.gpu_milli,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
        ),
    )


def engine_placer(shapes: Shapes) -> Placer:
    """The engine's placement with these typical shapes."""

    def placer(capacity: Capacity, request: Request) -> tuple[Placement, ...] | None:
        if not request.gpu_models:
            return place(capacity, request, None, shapes)
        for model in request.gpu_models:
            placements = place(capacity, request, model, shapes)
            if placements is not None:
                return placements
        return None

    return placer


def first_fit_placer(order: Sequence[Node]) -> Placer:
    def placer(capacity: Capacity, request: Request) -> tuple[Placement, ...] | None:
        for node in order:
            if fits(capacity, node, request):
                gpus = choose_gpus(capacity, node, request)
                if gpus is not None:
                    return _placement(node, gpus, request)
        return None

    return placer


def random_placer(order: Sequence[Node], rng: random.Random) -> Placer:
    """Draws among the fitting nodes in ``order``. Nodes in one GPU state take the same GPUs,
    so each state is weighed once (and remembered), then its nodes' CPU and memory checked."""
    position = {node.name: index for index, node in enumerate(order)}
    taken: dict[tuple[object, ...], tuple[int, ...] | None] = {}

    def placer(capacity: Capacity, request: Request) -> tuple[Placement, ...] | None:
        options = []
        for model in dict.fromkeys(request.gpu_models or (None,)):
            for state_id, members in capacity.classes(model):
                state = capacity.states[state_id]
                kind = (state, request.gpus_per_node, request.gpu_milli, request.topology)
                if kind not in taken:
                    taken[kind] = choose_gpus(capacity, members[0].node, request)
                gpus = taken[kind]
                if gpus is None:
                    continue
                for free in members:
                    if free.cpu >= request.cpu_milli and free.memory >= request.memory_mib:
                        options.append((position[free.name], gpus))
        if not options:
            return None
        options.sort()
        index, gpus = options[rng.randrange(len(options))]
        return _placement(order[index], gpus, request)

    return placer


def best_fit_placer(order: Sequence[Node]) -> Placer:
    max_cpu = max((node.cpu_milli for node in order), default=1) or 1
    max_gpu = max((node.gpu_count for node in order), default=1) * 1000 or 1

    def placer(capacity: Capacity, request: Request) -> tuple[Placement, ...] | None:
        best: tuple[float, str] | None = None
        chosen: tuple[Node, tuple[int, ...]] | None = None
        demand = request.gpus_per_node * request.gpu_milli
        for node in order:
            if not fits(capacity, node, request):
                continue
            free = capacity.free[node.name]
            left_cpu = free.cpu - request.cpu_milli
            left_gpu = sum(free.gpus) - demand
            score = (0.5 * left_cpu / max_cpu + 0.5 * left_gpu / max_gpu, node.name)
            if best is not None and score >= best:
                continue
            gpus = choose_gpus(capacity, node, request)
            if gpus is not None:
                best, chosen = score, (node, gpus)
        if chosen is None:
            return None
        return _placement(chosen[0], chosen[1], request)

    return placer


def make_placer(name: str, nodes: Sequence[Node], shapes: Shapes, seed: int) -> Placer:
    """The placer of a policy; ``seed`` drives ``random`` only."""
    if name == "default":
        return engine_placer(shapes)
    if name == "first-fit":
        return first_fit_placer(nodes)
    if name == "best-fit":
        return best_fit_placer(nodes)
    if name == "random":
        return random_placer(nodes, random.Random(f"random-placer-{seed}"))  # noqa: S311 -- simulation
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
