"""Fill mode: the protocol of the ATC'23 fragmentation study (Weng et al., FGD) on this trace.

Pods arrive one by one in a shuffled order and never leave. When the pod list asks for less
than the target, it is inflated as the study's simulator does: pods drawn from it with
replacement join it before the shuffle. Arrivals stop once the GPU demand that arrived
reaches ``arrivals`` x the cluster's GPU capacity. A pod that fits nowhere is skipped (its
demand arrived, nothing was allocated). At each whole percent of arrived demand the share of
GPU capacity left unallocated is recorded (fractional pods count by their milli-GPU share):
``100 - GPU allocation ratio``, the y axis of the study's Fig. 9(a).
"""

from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import WHOLE, Allocation, Node, Request, Snapshot
from scheduler.engine.placement import Shapes
from scheduler.simulator.placers import make_placer


@dataclass(frozen=True, slots=True)
class FillRun:
    """One policy on one seed: unallocated GPU % at each arrival percent reached."""

    policy: str
    seed: int
    curve: dict[int, float]  # arrived percent of GPU capacity -> unallocated GPU %
    unallocated_gpu_pct: float  # at the final arrival level
    placed: int
    skipped: int
    seconds: float


@dataclass(frozen=True, slots=True)
class FillResult:
    """Every policy over every seed, with medians."""

    arrivals: float
    capacity_gpus: float
    seeds: tuple[int, ...]
    runs: dict[str, list[FillRun]] = field(default_factory=dict)

    def median(self, policy: str) -> float:
        return statistics.median(run.unallocated_gpu_pct for run in self.runs[policy])

    def median_curve(self, policy: str) -> dict[int, float]:
        levels = sorted(set.intersection(*(set(run.curve) for run in self.runs[policy])))
        return {
            level: statistics.median(run.curve[level] for run in self.runs[policy])
            for level in levels
        }


def typical_shapes(requests: Sequence[Request]) -> Shapes:
    """The shapes the workload asks for, weighted by how many pods ask for each (the study's
    "target workload"), with their CPU, so that placement also counts GPUs stranded on nodes
    without CPU left: the median CPU of its pods for a shape of one GPU (whole or shared), each
    distinct CPU of its pods for a multi-GPU shape. Multi-GPU pods are few and their CPU
    decides which nodes can host them at all (an 8-GPU pod of 120 cores fits only the 128-core
    nodes); a median would hide that. CPU-only pods are left out: no GPU is unusable to
    them."""
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for request in requests:
        if request.gpus_per_node > 1:
            groups[(*request.shape, request.cpu_milli)].append(request.cpu_milli)
        elif request.gpus_per_node == 1:
            groups[request.shape].append(request.cpu_milli)
    return {
        (*shape[:3], int(statistics.median(cpus))): float(len(cpus))
        for shape, cpus in sorted(groups.items())
    }


def arrival_stream(requests: Sequence[Request], target_milli: int, seed: int) -> list[Request]:
    """The pods in the order they arrive for this seed, enough to reach ``target_milli``."""
    rng = random.Random(seed)  # noqa: S311 -- a reproducible simulation, not a secret
    pool = list(requests)
    demand = sum(r.gpu_demand_milli for r in pool)
    if demand <= 0:
        raise ValueError("the pod list asks for no GPU: nothing to fill")
    clone = 0
    while demand < target_milli:
        drawn = requests[rng.randrange(len(requests))]
        clone += 1
        pool.append(replace(drawn, id=f"{drawn.id}#{clone}"))
        demand += drawn.gpu_demand_milli
    rng.shuffle(pool)
    return pool


def fill_once(
    policy: str,
    nodes: Sequence[Node],
    stream: Sequence[Request],
    shapes: Shapes,
    target_milli: int,
    seed: int,
) -> FillRun:
    """Feed ``stream`` to one policy until ``target_milli`` of GPU demand has arrived."""
    started = time.perf_counter()
    capacity = Capacity(Snapshot(tuple(nodes)))
    placer = make_placer(policy, nodes, shapes, seed)
    total = sum(node.gpu_count for node in nodes) * WHOLE
    allocated = arrived = placed = skipped = 0
    curve: dict[int, float] = {0: 100.0}
    level = 1
    last_level = target_milli * 100 // total if total else 0  # the curve ends at the target
    for request in stream:
        if arrived >= target_milli:
            break
        placements = placer(capacity, request)
        if placements is None:
            skipped += 1
        else:
            capacity.take(
                Allocation(
                    workload=request.id,
                    queue=request.queue,
                    gpu_model=None,
                    placements=placements,
                )
            )
            allocated += request.gpu_demand_milli
            placed += 1
        arrived += request.gpu_demand_milli
        while level <= last_level and arrived * 100 >= level * total:
            curve[level] = 100.0 * (total - allocated) / total
            level += 1
    return FillRun(
        policy=policy,
        seed=seed,
        curve=curve,
        unallocated_gpu_pct=100.0 * (total - allocated) / total,
        placed=placed,
        skipped=skipped,
        seconds=time.perf_counter() - started,
    )


def target_milli(nodes: Sequence[Node], arrivals: float) -> int:
    return round(arrivals * sum(node.gpu_count for node in nodes) * WHOLE)


def run_fill(
    nodes: Sequence[Node],
    requests: Sequence[Request],
    *,
    arrivals: float,
    seeds: Sequence[int],
    policies: Sequence[str],
    jobs: int = 1,
    on_run: Callable[[FillRun], None] | None = None,
) -> FillResult:
    """Every policy on every seed (the same arrival order for all policies of a seed), in
    ``jobs`` processes; ``on_run`` hears of each run as it ends."""
    results = run_fill_lists(
        nodes,
        {"": requests},
        arrivals=arrivals,
        seeds=seeds,
        policies=policies,
        jobs=jobs,
        on_run=None if on_run is None else lambda _name, run: on_run(run),
    )
    return results[""]


def run_fill_lists(
    nodes: Sequence[Node],
    pod_lists: Mapping[str, Sequence[Request]],
    *,
    arrivals: float,
    seeds: Sequence[int],
    policies: Sequence[str],
    jobs: int = 1,
    on_run: Callable[[str, FillRun], None] | None = None,
) -> dict[str, FillResult]:
    """``run_fill`` for several pod lists on the same nodes, all runs in one pool of ``jobs``
    processes (so no process idles between lists); ``on_run`` hears of each run and its list."""
    target = target_milli(nodes, arrivals)
    args = [
        (name, policy, tuple(nodes), tuple(requests), typical_shapes(requests), target, seed)
        for name, requests in pod_lists.items()
        for seed in seeds
        for policy in policies
    ]
    runs: list[tuple[str, FillRun]] = []
    if jobs > 1 and len(args) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for future in as_completed([pool.submit(_fill_task, a) for a in args]):
                runs.append(future.result())
                if on_run is not None:
                    on_run(*runs[-1])
    else:
        for a in args:
            runs.append(_fill_task(a))
            if on_run is not None:
                on_run(*runs[-1])
    results = {}
    for name in pod_lists:
        by_policy: dict[str, list[FillRun]] = {policy: [] for policy in policies}
        for list_name, run in sorted(runs, key=lambda r: r[1].seed):
            if list_name == name:
                by_policy[run.policy].append(run)
        results[name] = FillResult(
            arrivals=arrivals,
            capacity_gpus=sum(node.gpu_count for node in nodes),
            seeds=tuple(seeds),
            runs=by_policy,
        )
    return results


def _fill_task(
    arguments: tuple[str, str, tuple[Node, ...], tuple[Request, ...], Shapes, int, int],
) -> tuple[str, FillRun]:
    name, policy, nodes, requests, shapes, target, seed = arguments
    stream = arrival_stream(requests, target, seed)
    return name, fill_once(policy, nodes, stream, shapes, target, seed)
