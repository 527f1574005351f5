"""Time mode: a discrete-event simulation of jobs that arrive, wait, run and end.

At every instant something happens (arrivals, completions), the policy decides:

- ``default``: the engine's ``schedule(snapshot, pending, policy, now)``, with one queue per
  tenant in one cohort (nominal quota by weight, borrowing allowed, so a tenant reclaims its
  share by preemption), the tenants' decayed usage as fair-share history, and the workload's
  typical shapes. Preempted jobs go back to the queue and start over.
- baselines (``random``, ``first-fit``, ``best-fit``): the queue in arrival order, each job
  placed by the baseline's node choice when it fits (no priorities, quotas or preemption).

Measured: queueing delay (first start - arrival), job completion time (end - arrival), the GPU
allocation ratio and fragmentation over time, fairness (Jain's index of the tenants' GPU
shares divided by their weights, while work waits), preemptions and completions.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.engine.capacity import Capacity
from scheduler.engine.cycle import schedule
from scheduler.engine.fairshare import decay, jain_index
from scheduler.engine.model import WHOLE, Allocation, Policy, QueueConfig, Snapshot
from scheduler.engine.placement import Shapes, fragmentation
from scheduler.simulator.placers import make_placer
from scheduler.simulator.workload import Job, Workload


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster after the decisions at ``at_s``."""

    at_s: float
    allocated_pct: float
    fragmented_pct: float  # of the free GPU, the share the typical shapes cannot use
    pending: int


@dataclass
class TimeRun:
    """One policy over the workload."""

    policy: str
    jobs: int
    completed: int = 0
    never_started: int = 0
    preemptions: int = 0
    delays_s: list[float] = field(default_factory=list)
    jcts_s: list[float] = field(default_factory=list)
    starts: list[tuple[float, float]] = field(default_factory=list)  # (start, delay)
    samples: list[Sample] = field(default_factory=list)
    fairness: float = 1.0
    allocated_pct: float = 0.0  # time-weighted mean
    fragmented_pct: float = 0.0  # time-weighted mean
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "completed": self.completed,
            "never_started": self.never_started,
            "preemptions": self.preemptions,
            "queueing_delay_s": _stats(self.delays_s),
            "jct_s": _stats(self.jcts_s),
            "gpu_allocation_pct": round(self.allocated_pct, 2),
            "fragmentation_pct": round(self.fragmented_pct, 2),
            "fairness_jain": round(self.fairness, 4),
            "seconds": round(self.seconds, 2),
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "p99": round(percentile(values, 99), 1),
        "mean": round(sum(values) / len(values), 1) if values else 0.0,
    }


def cohort_policy(workload: Workload, shapes: Shapes, usage: Mapping[str, float]) -> Policy:
    """One queue per tenant in one cohort; each model's GPUs shared out as nominal quota by
    weight (remainders to the heaviest tenants, so every GPU is somebody's to lend)."""
    per_model: dict[str, int] = {}
    for node in workload.nodes:
        if node.gpu_model:
            per_model[node.gpu_model] = per_model.get(node.gpu_model, 0) + node.gpu_count
    total_weight = sum(workload.tenants.values()) or 1.0
    order = sorted(workload.tenants, key=lambda t: (-workload.tenants[t], t))
    nominal: dict[str, dict[str, int]] = {t: {} for t in order}
    for model, gpus in per_model.items():
        given = 0
        for tenant in order:
            share = math.floor(gpus * workload.tenants[tenant] / total_weight)
            nominal[tenant][model] = share
            given += share
        for i in range(gpus - given):
            nominal[order[i % len(order)]][model] += 1
    return Policy(
        queues={
            t: QueueConfig(
                name=t, cohort="all", nominal=nominal[t], weight=workload.tenants[t], organization=t
            )
            for t in order
        },
        typical_shapes=shapes,
        usage_history=dict(usage),
        organization_usage=dict(usage),  # each tenant is an organization with one queue
    )


@dataclass(frozen=True, slots=True)
class Decided:
    """An instant of the engine's run once its decisions are applied: ``snapshot`` runs,
    ``pending`` waits, ``granted`` started now."""

    now: float
    snapshot: Snapshot
    pending: Sequence[Job]
    policy: Policy
    granted: Sequence[Allocation]


class Observer(Protocol):
    """Watches the engine's run (``default``) without changing it: what ended, what each
    instant decided, and the quiet time between instants."""

    def passing(self, last: float, now: float) -> None:
        """Nothing happens after ``last`` until ``now``: the state is as ``decided`` left it."""

    def ended(self, job: Job, now: float) -> None:
        """``job`` ended by itself at ``now`` (not preempted)."""

    def decided(self, instant: Decided) -> None:
        """The instant's decisions are applied."""


def run_time(
    workload: Workload,
    policy_name: str,
    *,
    seed: int = 42,
    half_life_s: float = 3600.0,
    observer: Observer | None = None,
) -> TimeRun:
    """Simulate one policy until every job has ended or can never start (``observer``
    watches the engine's policy only)."""
    if observer is not None and policy_name != "default":
        raise ValueError("only the engine's run (default) can be observed")
    started = time.perf_counter()
    nodes = workload.nodes
    shapes: Shapes = workload.shapes or {}
    total = sum(node.gpu_count for node in nodes) * WHOLE
    run = TimeRun(policy=policy_name, jobs=len(workload.jobs))
    jobs = {job.request.id: job for job in workload.jobs}
    arrivals = sorted(workload.jobs, key=lambda j: (j.arrival_s, j.request.id))
    # Events: (time, 0 = completion / 1 = arrival, sequence, job id, attempt).
    events: list[tuple[float, int, int, str, int]] = [
        (job.arrival_s, 1, i, job.request.id, 0) for i, job in enumerate(arrivals)
    ]
    heapq.heapify(events)
    sequence = len(events)
    pending: dict[str, Job] = {}  # arrival order
    running: dict[str, tuple[Allocation, int]] = {}  # job id -> (allocation, attempt)
    attempts: dict[str, int] = {}
    first_start: dict[str, float] = {}
    usage: dict[str, float] = {tenant: 0.0 for tenant in workload.tenants}
    capacity = Capacity(Snapshot(nodes))  # the baselines keep it; the engine rebuilds its own
    placer = None if policy_name == "default" else make_placer(policy_name, nodes, shapes, seed)
    last = 0.0
    fair_area = fair_time = alloc_area = frag_area = span = 0.0
    current_fair = 1.0
    current_alloc = current_frag = 0.0
    contended = False

    while events:
        now = events[0][0]
        # 1. What held since the last instant: usage, allocation, fairness.
        elapsed = now - last
        if elapsed > 0:
            alloc_area += current_alloc * elapsed
            frag_area += current_frag * elapsed
            span += elapsed
            if contended:
                fair_area += current_fair * elapsed
                fair_time += elapsed
            for tenant in usage:
                usage[tenant] = decay(usage[tenant], elapsed, half_life_s)
            for allocation, _ in running.values():
                usage[allocation.queue] = usage.get(allocation.queue, 0.0) + (
                    allocation.gpu_milli * elapsed / 3600.0
                )
        if observer is not None:
            observer.passing(last, now)
        last = now
        # 2. Everything that happens now: completions first, then arrivals.
        while events and events[0][0] == now:
            _, kind, _, job_id, attempt = heapq.heappop(events)
            if kind == 1:
                pending[job_id] = jobs[job_id]
                continue
            held = running.get(job_id)
            if held is None or held[1] != attempt:
                continue  # preempted since: this completion is stale
            del running[job_id]
            capacity.give(held[0])
            run.completed += 1
            run.jcts_s.append(now - jobs[job_id].arrival_s)
            if observer is not None:
                observer.ended(jobs[job_id], now)
        # 3. Decide.
        granted: list[Allocation] = []
        if placer is None:
            policy = cohort_policy(workload, shapes, usage)
            snapshot = Snapshot(nodes, tuple(a for a, _ in running.values()))
            decisions = schedule(snapshot, [j.request for j in pending.values()], policy, now)
            for preemption in decisions.preemptions:
                victim = running.pop(preemption.victim, None)
                if victim is None:
                    continue
                capacity.give(victim[0])
                run.preemptions += 1
                pending[preemption.victim] = jobs[preemption.victim]
            granted = list(decisions.allocations)
            for allocation in granted:
                capacity.take(allocation)
        else:
            for job_id, job in list(pending.items()):
                placements = placer(capacity, job.request)
                if placements is None:
                    continue
                allocation = Allocation(
                    workload=job_id,
                    queue=job.request.queue,
                    gpu_model=nodes_model(capacity, placements[0].node),
                    placements=placements,
                    organization=job.request.organization,
                    started_at=now,
                )
                capacity.take(allocation)
                granted.append(allocation)
        for allocation in granted:
            job_id = allocation.workload
            job = pending.pop(job_id)
            attempt = attempts.get(job_id, 0) + 1
            attempts[job_id] = attempt
            running[job_id] = (allocation, attempt)
            if job_id not in first_start:
                first_start[job_id] = now
                run.delays_s.append(now - job.arrival_s)
                run.starts.append((now, now - job.arrival_s))
            sequence += 1
            heapq.heappush(events, (now + job.runtime_s, 0, sequence, job_id, attempt))
        if observer is not None:
            snapshot = Snapshot(nodes, tuple(a for a, _ in running.values()))
            observer.decided(Decided(now, snapshot, list(pending.values()), policy, granted))
        # 4. The state until the next instant.
        allocated = sum(a.gpu_milli for a, _ in running.values())
        current_alloc = 100.0 * allocated / total if total else 0.0
        current_frag = _fragmented_pct(capacity, shapes)
        contended = bool(pending)
        current_fair = _fairness(workload, running, pending)
        run.samples.append(Sample(now, current_alloc, current_frag, len(pending)))

    run.never_started = len(pending)
    run.allocated_pct = alloc_area / span if span else current_alloc
    run.fragmented_pct = frag_area / span if span else current_frag
    run.fairness = fair_area / fair_time if fair_time else 1.0
    run.seconds = time.perf_counter() - started
    return run


def nodes_model(capacity: Capacity, node: str) -> str | None:
    return capacity.nodes[node].gpu_model


def _fragmented_pct(capacity: Capacity, shapes: Shapes) -> float:
    """Of the free GPU, the share that the typical shapes could not use (the engine's measure)."""
    free_total = 0
    unusable = 0.0
    for figures in capacity.free.values():
        node_free = sum(figures.gpus)
        if node_free:
            free_total += node_free
            unusable += fragmentation(figures.gpus, shapes)
    return 100.0 * unusable / free_total if free_total else 0.0


def _fairness(
    workload: Workload, running: Mapping[str, tuple[Allocation, int]], pending: Mapping[str, Job]
) -> float:
    """Jain's index over the tenants with work (running or waiting) of GPU held / weight."""
    held: dict[str, float] = {}
    for job in pending.values():
        held.setdefault(job.tenant, 0.0)
    for allocation, _ in running.values():
        held[allocation.queue] = held.get(allocation.queue, 0.0) + allocation.gpu_milli
    shares = [held[t] / max(workload.tenants.get(t, 1.0), 1e-9) for t in sorted(held)]
    return jain_index(shares)
