"""Where a workload goes: exact GPUs on exact nodes, chosen to keep the cluster able to serve
the shapes it is usually asked for.

Fragmentation, after Weng et al. (ATC'23, "fragmentation gradient descent"): for a node, the
free GPU capacity that the typical shapes cannot use, weighted by how often each shape is
asked for. Among the nodes a workload fits, the engine picks the one whose fragmentation grows
least; ties go to the node whose fragmentation for the next task alone (FGD's own measure)
grows least, then to the node left fuller (packing), then to the name, so decisions are
deterministic. Random, first-fit and best-fit placers live in ``scheduler.simulator`` to compare.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import cache, lru_cache
from typing import Final

from scheduler.engine.capacity import Capacity, Choice, State
from scheduler.engine.model import WHOLE, Node, Placement, Request, Topology

# (GPUs per node, milli per GPU, nodes[, CPU milli per node]) -> weight. A shape that names
# its CPU makes placement CPU-aware: a node's free CPU feeds only so many tasks of that shape,
# and the free GPU beyond them is lost to it (as in the ATC'23 study, where CPU strands more
# GPUs than GPU slivers do).
Shapes = Mapping[tuple[int, ...], float]


def fragmentation(free: Sequence[int], shapes: Shapes, cpu_free: int | None = None) -> float:
    """Expected milli-GPU of ``free`` that a typical workload could not use (with
    ``cpu_free``, also because the node lacks the CPU for as many tasks as its GPUs hold)."""
    total_weight = sum(shapes.values())
    if not total_weight:
        return 0.0
    total_free = sum(free)
    expected = 0.0
    for shape, weight in shapes.items():
        gpus, milli = shape[0], shape[1]
        tasks = len(free)  # the GPUs bound the tasks a node takes; its CPU may bound them more
        if cpu_free is not None and len(shape) > 3 and shape[3] > 0:
            tasks = min(tasks, cpu_free // shape[3])
        if milli < WHOLE:  # a share of one GPU: slivers smaller than it are lost to it
            roomy = sorted((f for f in free if f >= milli), reverse=True)
            unusable = total_free - sum(roomy[:tasks])
        else:  # whole GPUs in the shape's groups, as many groups as the CPU feeds
            whole = sum(1 for f in free if f == WHOLE)
            unusable = total_free - min(whole // gpus, tasks) * gpus * WHOLE
        expected += weight * unusable
    return expected / total_weight


def _next_task_fragmentation(free: Sequence[int], shapes: Shapes, cpu_free: int) -> float:
    """``fragmentation`` as FGD weighs it, for the next task of each shape only: all the free
    GPU is lost to a shape that cannot land, only slivers to one that can. It breaks ties."""
    total_weight = sum(shapes.values())
    if not total_weight:
        return 0.0
    total_free = sum(free)
    expected = 0.0
    for shape, weight in shapes.items():
        gpus, milli = shape[0], shape[1]
        whole = sum(1 for f in free if f == WHOLE)
        if (len(shape) > 3 and cpu_free < shape[3]) or (milli == WHOLE and whole < gpus):
            unusable = total_free
        elif milli < WHOLE:
            unusable = sum(f for f in free if f < milli)
        else:
            unusable = total_free - whole * WHOLE
        expected += weight * unusable
    return expected / total_weight


def choose_gpus(capacity: Capacity, node: Node, request: Request) -> tuple[int, ...] | None:
    """The GPUs of ``node`` this request would take, or None when they are not there."""
    return choose_in(capacity.free[node.name].gpus, node, request)


def choose_in(free: Sequence[int], node: Node, request: Request) -> tuple[int, ...] | None:
    """``choose_gpus`` for ``node`` with ``free`` milli-GPU per GPU (a state being weighed)."""
    return _choose(
        free,
        node.gpu_domains,
        node.shareable,
        request.gpu_milli,
        request.gpus_per_node,
        request.topology is Topology.SAME_NVLINK_DOMAIN,
    )


def _choose(
    free: Sequence[int],
    domains: Sequence[int],
    shareable: bool,
    milli: int,
    wanted: int,
    one_domain: bool,
) -> tuple[int, ...] | None:
    if milli < WHOLE:
        if not shareable:
            return None
        fitting = [i for i, f in enumerate(free) if f >= milli]
        if not fitting:
            return None
        # Best fit: fill a GPU already shared before opening a whole one.
        return (min(fitting, key=lambda i: (free[i], i)),)
    by_domain: dict[int, list[int]] = defaultdict(list)
    for index, f in enumerate(free):
        if f == WHOLE:
            by_domain[domains[index]].append(index)
    # The tightest domain that holds the whole request keeps the larger domains whole.
    holding = sorted((len(g), d) for d, g in by_domain.items() if len(g) >= wanted)
    if holding:
        return tuple(by_domain[holding[0][1]][:wanted])
    if one_domain:
        return None
    chosen: list[int] = []
    for _count, domain in sorted((len(g), d) for d, g in by_domain.items()):
        chosen.extend(by_domain[domain])
    return tuple(sorted(chosen[:wanted])) if len(chosen) >= wanted else None


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
    growth, left = _growth(capacity.free[node.name].gpus, gpus, request.gpu_milli, shapes)
    return (growth, left, node.name)


def _growth(
    before: Sequence[int], gpus: tuple[int, ...], milli: int, shapes: Shapes
) -> tuple[float, int]:
    """How much fragmentation grows by taking ``milli`` of ``gpus``, and what stays free."""
    after = _after(before, gpus, milli)
    growth = fragmentation(after, shapes) - fragmentation(list(before), shapes)
    return (round(growth, 6), sum(after))


def _choices(capacity: Capacity, request: Request, shapes: Shapes) -> dict[int, Choice]:
    """The memo of choices for requests like this one (by state id)."""
    key = (
        request.gpu_milli,
        request.gpus_per_node,
        request.topology is Topology.SAME_NVLINK_DOMAIN,
        tuple(shapes.items()),
    )
    choices = capacity.choices.get(key)
    if choices is None:
        choices = capacity.choices[key] = {}
    return choices


def _choose_in_state(capacity: Capacity, state_id: int, request: Request) -> tuple[int, ...] | None:
    """The GPUs the request would take on any node in this GPU state."""
    free, domains, shareable = capacity.states[state_id]
    return _choose(
        free,
        domains,
        shareable,
        request.gpu_milli,
        request.gpus_per_node,
        request.topology is Topology.SAME_NVLINK_DOMAIN,
    )


def _after(free: Sequence[int], gpus: tuple[int, ...], milli: int) -> list[int]:
    """The free shares once ``milli`` of each of ``gpus`` is taken."""
    after = list(free)
    for index in gpus:
        after[index] -= milli
    return after


def _choice(capacity: Capacity, state_id: int, request: Request, shapes: Shapes) -> Choice:
    free = capacity.states[state_id][0]
    gpus = _choose_in_state(capacity, state_id, request)
    if gpus is None:
        return None
    growth, left = _growth(free, gpus, request.gpu_milli, shapes)
    return (gpus, growth, left)


Option = tuple[tuple[float, int, str], Node, tuple[int, ...]]


def _allowed(request: Request, name: str) -> bool:
    """Whether the request may go to node ``name`` (``Request.nodes_allowed``)."""
    return request.nodes_allowed is None or name in request.nodes_allowed


_UNKNOWN: Final[Choice] = ((), -1.0, -1)  # a state not weighed yet for this kind of request


def place(
    capacity: Capacity, request: Request, model: str | None, shapes: Shapes
) -> tuple[Placement, ...] | None:
    """All the placements of the request on nodes of ``model`` (None: any model, single node
    only), or None when it does not fit now.

    Nodes in the same GPU state cost the same: each state is weighed once (and remembered
    for the cycle), then the first of its nodes by name with the CPU and memory wins it."""
    if request.nodes != 1 and request.topology is Topology.SINGLE_NODE:
        return None
    if (
        request.gpu_milli == WHOLE
        and capacity.free_gpus_of(None if model is None else (model,))
        < request.gpus_per_node * request.least_nodes
    ):
        return None  # not enough whole GPUs free on all its nodes together: none fits
    if any(len(shape) > 3 for shape in shapes):
        return _place_cpu_aware(capacity, request, model, shapes)
    choices = _choices(capacity, request, shapes)
    cpu, memory = request.cpu_milli, request.memory_mib
    wanted = _whole_wanted(request)
    if request.nodes == 1:
        # The least (growth, left, name) so far, as scalars (compiled, they compare natively).
        best: Node | None = None
        best_growth, best_left, best_name = 0.0, 0, ""
        best_gpus: tuple[int, ...] = ()
        for state_id, members in capacity.classes_with(model, wanted):
            choice = choices.get(state_id, _UNKNOWN)
            if choice is _UNKNOWN:
                choice = choices[state_id] = _choice(capacity, state_id, request, shapes)
            if choice is None:
                continue
            gpus, growth, left = choice
            if best is not None and (
                growth > best_growth or (growth == best_growth and left > best_left)
            ):
                continue  # no node of this state can win, whatever its name
            for free in members:
                if free.cpu >= cpu and free.memory >= memory and _allowed(request, free.name):
                    name = free.name
                    if (
                        best is None
                        or growth < best_growth
                        or left < best_left
                        or (left == best_left and name < best_name)
                    ):
                        best, best_gpus = free.node, gpus
                        best_growth, best_left, best_name = growth, left, name
                    break
        if best is None:
            return None
        return (_placement(best, best_gpus, request),)
    options: list[Option] = []
    for state_id, members in capacity.classes_with(model, wanted):
        if state_id in choices:
            choice = choices[state_id]
        else:
            choice = choices[state_id] = _choice(capacity, state_id, request, shapes)
        if choice is None:
            continue
        gpus, growth, left = choice
        for free in members:
            if free.cpu >= cpu and free.memory >= memory and _allowed(request, free.name):
                options.append(((growth, left, free.name), free.node, gpus))
    return _place_gang(options, request)


def weigh(
    capacity: Capacity, placements: tuple[Placement, ...], request: Request, shapes: Shapes
) -> tuple[float, int]:
    """What ``place`` weighs a placement by, summed over its nodes: the growth of
    fragmentation, then the milli-GPU left free; to compare placements on different GPU
    models (before they are taken). CPU-aware shapes count CPU as ``_place_cpu_aware`` does."""
    cpu_aware = any(len(shape) > 3 for shape in shapes)
    growth, left = 0.0, 0
    for placement in placements:
        node = capacity.nodes[placement.node]
        if cpu_aware:
            figures = capacity.free[node.name]
            free, have = figures.gpus, figures.cpu
            after = _after(free, placement.gpus, request.gpu_milli)
            growth += round(
                fragmentation(after, shapes, have - request.cpu_milli)
                - fragmentation(free, shapes, have),
                6,
            )
            left += sum(after)
        else:
            cost = _cost(capacity, node, placement.gpus, request, shapes)
            growth, left = growth + cost[0], left + cost[1]
    return (round(growth, 6), left)


def _place_cpu_aware(
    capacity: Capacity, request: Request, model: str | None, shapes: Shapes
) -> tuple[Placement, ...] | None:
    """``place`` when the typical shapes name their CPU: the cost depends on each node's CPU
    too, so nodes of one GPU state are weighed one by one. Fragmentation depends on CPU only
    through how many tasks of each shape it feeds (thresholds: multiples of the shapes' CPU),
    so costs are remembered per threshold bucket, and fragmentation per GPU state and bucket
    from one request to the next. Single nodes of equal growth go to the one where the next
    task of each shape fares best (``_next_task_fragmentation``)."""
    if request.nodes == 1:
        return _place_single_cpu_aware(capacity, request, model, shapes)
    cpus = frozenset(shape[3] for shape in shapes if len(shape) > 3)
    memo = _memo(tuple(shapes.items()))
    cpu, memory = request.cpu_milli, request.memory_mib
    costs: dict[tuple[int, int, int], tuple[float, float]] = {}
    options: list[Option] = []
    one_domain = request.topology is Topology.SAME_NVLINK_DOMAIN
    for state_id, members in capacity.classes_with(model, _whole_wanted(request)):
        state = capacity.states[state_id]
        taken = _taking(state, request.gpu_milli, request.gpus_per_node, one_domain)
        if taken is None:
            continue
        free, (gpus, after) = state[0], taken
        left = sum(after)
        thresholds = _thresholds(cpus, len(free))
        for figures in members:
            have = figures.cpu
            if have < cpu or figures.memory < memory or not _allowed(request, figures.name):
                continue
            key = (
                state_id,
                bisect_right(thresholds, have) - 1,
                bisect_right(thresholds, have - cpu) - 1,
            )
            cost = costs.get(key)
            if cost is None:
                cost = costs[key] = _cost_between(free, after, thresholds, key[1], key[2], memo)
            options.append(((cost[0], left, figures.name), figures.node, gpus))
    return _place_gang(options, request)


def _place_single_cpu_aware(
    capacity: Capacity, request: Request, model: str | None, shapes: Shapes
) -> tuple[Placement, ...] | None:
    """The single-node case of ``_place_cpu_aware``, weighed in one pass: the least growth,
    then the least growth for the next task of each shape, then the GPU left free, then the
    name. Within one GPU state, nodes whose CPU falls in the same buckets (before and after)
    cost the same, so only the first of them by name is weighed."""
    cpus = frozenset(shape[3] for shape in shapes if len(shape) > 3)
    memo = _memo(tuple(shapes.items()))
    cpu, memory = request.cpu_milli, request.memory_mib
    one_domain = request.topology is Topology.SAME_NVLINK_DOMAIN
    best: tuple[float, float, int, str] | None = None
    best_gpus: tuple[int, ...] = ()
    best_node: Node | None = None
    known, at = memo.known, memo.at
    for state_id, members in capacity.classes_with(model, _whole_wanted(request)):
        state = capacity.states[state_id]
        taken = _taking(state, request.gpu_milli, request.gpus_per_node, one_domain)
        if taken is None:
            continue
        free, (gpus, after) = state[0], taken
        left = sum(after)
        thresholds = _thresholds(cpus, len(free))
        weighed: set[tuple[int, int]] = set()
        for figures in members:
            have = figures.cpu
            if have < cpu or figures.memory < memory or not _allowed(request, figures.name):
                continue
            before = thresholds[bisect_right(thresholds, have) - 1]
            remains = thresholds[bisect_right(thresholds, have - cpu) - 1]
            if len(members) > 1:
                if (before, remains) in weighed:
                    continue  # an earlier name of this state costs the same
                weighed.add((before, remains))
            now = known.get((free, before)) or at(free, before)
            then = known.get((after, remains)) or at(after, remains)
            name = figures.name
            candidate = (round(then[0] - now[0], 6), round(then[1] - now[1], 6), left, name)
            if best is None or candidate < best:
                best, best_gpus, best_node = candidate, gpus, figures.node
    if best_node is None:
        return None
    return (_placement(best_node, best_gpus, request),)


def _cost_between(
    free: tuple[int, ...],
    after: tuple[int, ...],
    thresholds: tuple[int, ...],
    before: int,
    remains: int,
    memo: _Memo,
) -> tuple[float, float]:
    """Growth of fragmentation, and of the next task's, from ``free`` with the CPU of bucket
    ``before`` to ``after`` with that of bucket ``remains`` (the lowest CPU of a bucket stands
    for it: fragmentation is the same)."""
    now, now_next = memo.at(free, thresholds[before])
    then, then_next = memo.at(after, thresholds[remains])
    return (round(then - now, 6), round(then_next - now_next, 6))


@lru_cache(maxsize=1 << 16)
def _taking(
    state: State, milli: int, wanted: int, one_domain: bool
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The GPUs a request takes on a node in this GPU state and the free shares it leaves,
    remembered from one request to the next."""
    free, domains, shareable = state
    gpus = _choose(free, domains, shareable, milli, wanted, one_domain)
    return None if gpus is None else (gpus, tuple(_after(free, gpus, milli)))


@cache
def _thresholds(cpus: frozenset[int], gpu_count: int) -> tuple[int, ...]:
    """The free CPU levels at which a node of ``gpu_count`` GPUs feeds one task more of
    some shape (never more tasks than GPUs matter), from 0."""
    return tuple(sorted({0} | {cpu * tasks for cpu in cpus for tasks in range(1, gpu_count + 1)}))


_MEMO_ENTRIES: Final = 1 << 17  # then a memo starts afresh, so a long-lived process stays small


class _Memo:
    """Fragmentation (full, and for the next task) of GPU states at CPU levels, for one mix of
    typical shapes, remembered from one request to the next. Keyed by state and level only:
    hashing the mix on every lookup cost more than the lookup."""

    def __init__(self, mix: tuple[tuple[tuple[int, ...], float], ...]) -> None:
        self.shapes = dict(mix)
        self.known: dict[tuple[tuple[int, ...], int], tuple[float, float]] = {}

    def at(self, free: tuple[int, ...], cpu_free: int) -> tuple[float, float]:
        key = (free, cpu_free)
        value = self.known.get(key)
        if value is None:
            if len(self.known) >= _MEMO_ENTRIES:
                self.known.clear()
            value = self.known[key] = (
                fragmentation(free, self.shapes, cpu_free),
                _next_task_fragmentation(free, self.shapes, cpu_free),
            )
        return value


@lru_cache(maxsize=64)
def _memo(mix: tuple[tuple[tuple[int, ...], float], ...]) -> _Memo:
    return _Memo(mix)


def _whole_wanted(request: Request) -> int:
    """The whole GPUs a node needs free to take the request (0 for a share of one): only the
    states with as many are weighed (``Capacity.classes_with``; their order does not matter,
    the least cost wins, ties to the name)."""
    return request.gpus_per_node if request.gpu_milli == WHOLE else 0


def _place_gang(options: list[Option], request: Request) -> tuple[Placement, ...] | None:
    """``request.nodes`` distinct nodes, or as many as there are down to its minimum (an
    elastic gang): in one rack when any rack can hold them all (the cheapest such rack), else
    across as few racks as possible (``same_rack``: never)."""
    by_rack: dict[str, list[Option]] = defaultdict(list)
    for option in sorted(options, key=lambda o: o[0]):
        by_rack[option[1].rack].append(option)
    if request.topology is Topology.SAME_RACK:
        room = max((len(rack_options) for rack_options in by_rack.values()), default=0)
    else:
        room = len(options)
    wanted = min(request.nodes, room)
    if wanted < request.least_nodes:
        return None
    whole_racks = [
        (sum(o[0][0] for o in rack_options[:wanted]), rack, rack_options[:wanted])
        for rack, rack_options in by_rack.items()
        if len(rack_options) >= wanted
    ]
    if whole_racks:  # always for ``same_rack``: ``wanted`` is what its fullest rack holds
        _, _, chosen = min(whole_racks, key=lambda entry: (entry[0], entry[1]))
    else:
        chosen = []
        for _, rack_options in sorted(by_rack.items(), key=lambda e: (-len(e[1]), e[0])):
            chosen.extend(rack_options[: wanted - len(chosen)])
            if len(chosen) == wanted:
                break
    return tuple(_placement(node, gpus, request) for _, node, gpus in chosen)
