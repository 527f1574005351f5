"""Workloads for time mode: jobs that arrive and run for a while, from a synthetic generator or
from a pod list's timestamps."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from scheduler.engine.model import WHOLE, Node, Request
from scheduler.simulator.trace import TracePod

T = TypeVar("T")

# (GPUs per node, milli-GPU per GPU) -> weight: a mix of shared, whole and multi-GPU jobs.
DEFAULT_SHAPES: Mapping[tuple[int, int], float] = {
    (1, 250): 0.15,
    (1, 500): 0.15,
    (1, 1000): 0.35,
    (2, 1000): 0.15,
    (4, 1000): 0.12,
    (8, 1000): 0.08,
}
DEFAULT_TENANTS: Mapping[str, float] = {"acme": 2.0, "globex": 1.0, "initech": 1.0}
# priority -> (weight, preemptible): experiments may be preempted, production may not.
DEFAULT_PRIORITIES: Mapping[int, tuple[float, bool]] = {0: (0.7, True), 10: (0.3, False)}


@dataclass(frozen=True, slots=True)
class Job:
    """A workload that arrives at ``arrival_s`` and, once started, runs ``runtime_s``."""

    request: Request
    arrival_s: float
    runtime_s: float

    @property
    def tenant(self) -> str:
        return self.request.queue


@dataclass(frozen=True, slots=True)
class Workload:
    """A fleet, its jobs, and what the policies need to know about them."""

    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    tenants: Mapping[str, float]  # tenant (queue) -> weight
    shapes: Mapping[tuple[int, ...], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """What the generator draws from. Arrivals are Poisson; runtimes log-normal with the given
    mean (sigma 1); shapes, tenants and priorities by weight."""

    jobs: int = 400
    arrival_rate_per_h: float = 25.0
    mean_runtime_h: float = 1.0
    nodes: int = 8
    gpus_per_node: int = 8
    gpu_model: str = "h100"
    cpu_milli_per_gpu: int = 12_000
    memory_mib_per_gpu: int = 131_072
    shapes: Mapping[tuple[int, int], float] = field(default_factory=lambda: dict(DEFAULT_SHAPES))
    tenants: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TENANTS))
    priorities: Mapping[int, tuple[float, bool]] = field(
        default_factory=lambda: dict(DEFAULT_PRIORITIES)
    )
    seed: int = 42


def synthetic(spec: SyntheticSpec) -> Workload:
    """A reproducible workload: the same spec (seed included) gives the same jobs."""
    _check(spec)
    rng = random.Random(spec.seed)  # noqa: S311 -- a reproducible simulation, not a secret
    nodes = tuple(
        Node(
            name=f"node-{i:03d}",
            gpu_model=spec.gpu_model,
            gpu_domains=(0,) * spec.gpus_per_node,
            cpu_milli=spec.cpu_milli_per_gpu * spec.gpus_per_node,
            memory_mib=spec.memory_mib_per_gpu * spec.gpus_per_node,
            rack=f"rack-{i // 16:02d}",
            shareable=True,
        )
        for i in range(spec.nodes)
    )
    shapes = sorted(spec.shapes.items())
    tenants = sorted(spec.tenants.items())
    priorities = sorted(spec.priorities.items())
    sigma = 1.0
    mu = math.log(spec.mean_runtime_h * 3600.0) - sigma * sigma / 2
    jobs = []
    clock = 0.0
    for index in range(spec.jobs):
        clock += rng.expovariate(spec.arrival_rate_per_h / 3600.0)
        (gpus, milli) = _draw(rng, [(s, w) for s, w in shapes])
        tenant = _draw(rng, tenants)
        priority = _draw(rng, [(p, w) for p, (w, _) in priorities])
        preemptible = spec.priorities[priority][1]
        runtime = max(60.0, rng.lognormvariate(mu, sigma))
        share = gpus * milli / WHOLE
        jobs.append(
            Job(
                request=Request(
                    id=f"job-{index:05d}",
                    queue=tenant,
                    gpus_per_node=gpus,
                    gpu_milli=milli,
                    cpu_milli=round(spec.cpu_milli_per_gpu * share),
                    memory_mib=round(spec.memory_mib_per_gpu * share),
                    priority=priority,
                    preemptible=preemptible,
                    runtime_estimate_s=runtime,
                    organization=tenant,
                    project=tenant,
                    submitted_at=clock,
                ),
                arrival_s=clock,
                runtime_s=runtime,
            )
        )
    return Workload(
        nodes=nodes,
        jobs=tuple(jobs),
        tenants=dict(tenants),
        shapes={(g, m, 1): w for (g, m), w in shapes},
    )


def _check(spec: SyntheticSpec) -> None:
    if spec.jobs < 1 or spec.nodes < 1 or spec.gpus_per_node < 1:
        raise ValueError("jobs, nodes and GPUs per node must be at least 1")
    if spec.arrival_rate_per_h <= 0 or spec.mean_runtime_h <= 0:
        raise ValueError("the arrival rate and the mean runtime must be positive")
    for gpus, milli in spec.shapes:
        if not 1 <= gpus <= spec.gpus_per_node or not 0 < milli <= WHOLE:
            raise ValueError(f"shape {gpus}x{milli}: 1..{spec.gpus_per_node} GPUs of 1..1000 milli")
        if gpus > 1 and milli != WHOLE:
            raise ValueError(f"shape {gpus}x{milli}: only one GPU may be shared")
    for name, weights in (
        ("shapes", spec.shapes.values()),
        ("tenants", spec.tenants.values()),
        ("priorities", [w for w, _ in spec.priorities.values()]),
    ):
        if not weights or any(w < 0 for w in weights) or not sum(weights):
            raise ValueError(f"{name}: weights must be non-negative and not all zero")


# The trace has no tenants: its QoS classes stand in for them, latency-sensitive work being
# production (not preemptible) and best-effort work preemptible experiments.
QOS_TENANTS: Mapping[str, tuple[float, int, bool]] = {
    "LS": (1.0, 10, False),
    "Guaranteed": (1.0, 10, False),
    "Burstable": (1.0, 5, False),
    "BE": (1.0, 0, True),
}


def from_trace(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    *,
    max_jobs: int | None = None,
    speedup: float = 1.0,
    skip_jobs: int = 0,
) -> Workload:
    """Jobs from a pod list's times: arrival at ``creation_time`` (from the first pod on, divided
    by ``speedup``), runtime from scheduling (or creation) to deletion. Pods without times, or
    that ask for no GPU, are left out; so are the first ``skip_jobs`` by creation time (the
    bundled list's first pods are a few services spread over months before its busy weeks)."""
    timed = [
        (pod, pod.qos)
        for pod in pods
        if pod.created_at is not None and pod.deleted_at is not None and pod.gpu_demand_milli
    ]
    timed.sort(key=lambda item: (item[0].created_at or 0.0, item[0].request.id))
    timed = timed[skip_jobs:]
    if max_jobs is not None:
        timed = timed[:max_jobs]
    if not timed:
        raise ValueError("the pod list has no timed GPU pods")
    origin = timed[0][0].created_at or 0.0
    jobs = []
    for pod, q in timed:
        created = pod.created_at or 0.0
        start = pod.scheduled_at if pod.scheduled_at is not None else created
        runtime = max(1.0, (pod.deleted_at or created) - start)
        arrival = (created - origin) / speedup
        _, priority, preemptible = QOS_TENANTS.get(q, (1.0, 0, True))
        tenant = q or "BE"
        jobs.append(
            Job(
                request=replace(
                    pod.request,
                    queue=tenant,
                    organization=tenant,
                    project=tenant,
                    priority=priority,
                    preemptible=preemptible,
                    runtime_estimate_s=runtime,
                    submitted_at=arrival,
                ),
                arrival_s=arrival,
                runtime_s=runtime,
            )
        )
    tenants = {job.tenant: QOS_TENANTS.get(job.tenant, (1.0, 0, True))[0] for job in jobs}
    counts: dict[tuple[int, ...], float] = {}
    for job in jobs:
        counts[job.request.shape] = counts.get(job.request.shape, 0.0) + 1.0
    return Workload(nodes=tuple(nodes), jobs=tuple(jobs), tenants=tenants, shapes=counts)


def _draw(rng: random.Random, weighted: Sequence[tuple[T, float]]) -> T:
    total = sum(w for _, w in weighted)
    point = rng.random() * total
    for value, weight in weighted:
        point -= weight
        if point < 0:
            return value
    return weighted[-1][0]


# Round figures users pick for a runtime estimate (15 min .. 1 week), seconds.
ROUND_ESTIMATES_S: tuple[float, ...] = tuple(
    h * 3600.0 for h in (0.25, 0.5, 1, 2, 4, 8, 12, 24, 48, 72, 168)
)


@dataclass(frozen=True, slots=True)
class Noise:
    """How users' runtime estimates and their jobs' real runtimes differ, as users' do.

    For each job, with its length ``L`` from the workload (the trace's duration, or the
    generator's draw):

    - the user's estimate is ``L`` times a factor drawn log-normally with median
      ``factor_median`` and sigma ``factor_sigma`` (most overestimate, about 8 % under at the
      defaults); with probability ``round_share`` it is then rounded up to the next of
      ``ROUND_ESTIMATES_S`` (1 h, 4 h, 24 h...), else up to a whole minute;
    - the job really runs ``L``, except that ``fail_share`` of the jobs fail after a fraction
      of ``L`` drawn uniformly from (0, 1), and ``early_share`` end early (converged, or
      stopped by the user) after a uniform fraction from ``early_from`` to 1.

    The real runtime drives the simulation; the engine and the forecasts see only the
    estimate. Draws are made in job-id order from ``random.Random(seed)``: reproducible.
    """

    factor_median: float = 2.0
    factor_sigma: float = 0.5
    round_share: float = 0.5
    fail_share: float = 0.1
    early_share: float = 0.1
    early_from: float = 0.5
    seed: int = 42


def with_noise(workload: Workload, noise: Noise) -> Workload:
    """The workload with noisy estimates and real runtimes (see ``Noise``)."""
    if noise.factor_median <= 0 or noise.factor_sigma < 0:
        raise ValueError("the estimate factor's median must be positive, its sigma not negative")
    if not 0 <= noise.fail_share + noise.early_share <= 1 or not 0 <= noise.early_from <= 1:
        raise ValueError("fail and early shares must sum to at most 1, early_from within 0..1")
    rng = random.Random(noise.seed)  # noqa: S311 -- a reproducible simulation, not a secret
    mu = math.log(noise.factor_median)
    noisy: dict[str, Job] = {}
    for job in sorted(workload.jobs, key=lambda j: j.request.id):
        length = job.runtime_s
        estimate = length * rng.lognormvariate(mu, noise.factor_sigma)
        if rng.random() < noise.round_share:
            estimate = next(
                (r for r in ROUND_ESTIMATES_S if r >= estimate),
                math.ceil(estimate / 86400.0) * 86400.0,
            )
        else:
            estimate = math.ceil(estimate / 60.0) * 60.0
        fate, fraction = rng.random(), rng.random()
        runtime = length
        if fate < noise.fail_share:
            runtime = max(1.0, length * fraction)
        elif fate < noise.fail_share + noise.early_share:
            runtime = max(1.0, length * (noise.early_from + (1 - noise.early_from) * fraction))
        noisy[job.request.id] = replace(
            job, request=replace(job.request, runtime_estimate_s=estimate), runtime_s=runtime
        )
    return replace(workload, jobs=tuple(noisy[job.request.id] for job in workload.jobs))
