"""``manage.py bench estimates_api``: start-time estimates and dry runs as the service answers
them, on a cluster whose line is in PostgreSQL (issue 30 §2).

A scratch database (``registry.scratch_database``) is seeded through the services: one
cluster of ``NODES`` x 8 H100s, ``PROJECTS`` projects of one organization, and job arrays of
1, 2, 4 and 8 GPUs (runtime estimates of 1 to 4 h) until ``WAITING`` workloads wait; one
cycle after the first array fills the cluster (the work ahead runs). Then, in this process:

- ``baseline``: ``FORECAST_INPUTS_TTL_S`` = 0, the cluster's forecast inputs read for every
  request, as before ``latest_forecast_inputs`` kept them;
- ``reused``: the inputs kept (read once, by a request not counted), each request checking
  only that no event concerning the cluster was logged since (``store.touched_since``).

Each of ``REQUESTS`` requests of each kind, ``workload_estimate`` (the service behind
``POST /workloads/estimate``) and ``workload_dry_run`` (``?dry_run=true``), is an 8-GPU job of
the first project, after a full garbage collection; figures are the mean CPU seconds of this
process per request (PostgreSQL's own CPU not counted), the wall seconds, and the ratio
reused / baseline. Nothing is asserted.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import override_settings

from bench.registry import engine_build, peak_rss_mb, scratch_database, suite
from inventory import services as inventory
from inventory.lifecycle import NodeAction
from neocloud.core.transactions import atomic_with_retry
from orders.services import approval_threshold_set
from scheduler import scheduling, services
from scheduler.models import WAITING_STATUSES, Allocation, Workload
from scheduler.selectors.forecasts import forget_forecast_inputs
from scheduler.specs import WorkloadSpec
from tenants.access import Actor
from tenants.models import Project
from tenants.services import organization_create, project_create, user_register

WAITING = 20_000
NODES = 32
PROJECTS = 4
ARRAY = 2_500  # workloads per array (one append each)
SHAPES = ((1, 3600.0), (2, 7200.0), (4, 3600.0), (8, 14_400.0))  # GPUs, runtime estimate
REQUESTS = 3
REGION = "bench-estimates"
# No bound of the product gets in the way of the measurement: the line is as long as asked,
# and the requests are not rate-limited.
UNBOUNDED = {
    "WAITING_WORKLOADS_PER_ORGANIZATION": 10_000_000,
    "WAITING_WORKLOADS_PER_PROJECT": 10_000_000,
    "FORECASTS_PER_MINUTE_PER_ORGANIZATION": 1_000_000,
}


def _seed(waiting: int) -> tuple[Project, float]:
    """The cluster, its organization's projects and their arrays, through the services; the
    first project (the one asking) and the seconds the seeding took."""
    started = time.monotonic()
    actor = Actor.system_actor("bench")
    owner = atomic_with_retry(
        user_register, actor=actor, email="owner@bench.example", full_name="Bench Owner"
    )
    organization = atomic_with_retry(
        organization_create, actor=actor, name="Bench Lab", owner=owner, slug="bench-lab"
    )
    projects = [
        atomic_with_retry(
            project_create, actor=actor, organization=organization, name=f"P{n}", slug=f"p{n}"
        )
        for n in range(PROJECTS)
    ]
    # Arrays of thousands of GPUs in all, submitted without an order.
    atomic_with_retry(approval_threshold_set, actor=actor, threshold_gpus=10 * WAITING * 8)
    model = atomic_with_retry(
        inventory.gpu_model_define,
        actor=actor,
        slug="h100",
        name="H100",
        vendor="NVIDIA",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=False,
    )
    region = atomic_with_retry(inventory.region_define, actor=actor, slug=REGION, name=REGION)
    cluster = atomic_with_retry(
        inventory.cluster_define, actor=actor, region=region, slug=REGION, name="B"
    )
    for n in range(NODES):
        node, _ = atomic_with_retry(
            inventory.node_register,
            actor=actor,
            cluster=cluster,
            name=f"{REGION}-{n}",
            gpu_model=model,
            cpu_milli=128_000,
            memory_mib=1_048_576,
            gpus=[inventory.GpuSlot(index=g) for g in range(8)],
        )
        for action in (NodeAction.PROVISION, NodeAction.BECOME_READY):
            node = atomic_with_retry(
                inventory.node_transition, actor=actor, node=node, action=action
            )
    n = 0
    while _waiting() < waiting:
        gpus, runtime = SHAPES[n % len(SHAPES)]
        spec = WorkloadSpec(
            name=f"array {n}",
            gpu_models=("h100",),
            gpus_per_node=gpus,
            region=REGION,
            runtime_estimate_s=runtime,
        )
        atomic_with_retry(
            services.workload_submit_array,
            actor=actor,
            project=projects[n % PROJECTS],
            spec=spec,
            count=min(ARRAY, waiting - _waiting()),
        )
        if n == 0:
            scheduling.cycle_run(cluster.pk)  # fills the cluster: running work ahead
        n += 1
    return projects[0], time.monotonic() - started


def _waiting() -> int:
    return Workload.objects.filter(status__in=WAITING_STATUSES).count()


def _per_request(ask: Callable[[], object]) -> tuple[float, float]:
    """Mean (CPU, wall) seconds of ``REQUESTS`` calls of ``ask``, each after a collection."""
    cpu, wall = [], []
    for _ in range(REQUESTS):
        gc.collect()
        started, clock = time.process_time(), time.perf_counter()
        ask()
        cpu.append(time.process_time() - started)
        wall.append(time.perf_counter() - clock)
    return statistics.mean(cpu), statistics.mean(wall)


def _ratio(ours: float, baseline: float) -> float | None:
    return round(ours / baseline, 3) if baseline else None


@suite("estimates_api")
def bench_estimates_api(scale: float) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        raise CommandError("bench estimates_api measures PostgreSQL: set DATABASE_URL")
    waiting = max(1, round(WAITING * scale))
    actor = Actor.system_actor("bench")
    probe = WorkloadSpec(
        name="probe", gpu_models=("h100",), gpus_per_node=8, region=REGION, runtime_estimate_s=3600
    )
    asks: dict[str, Callable[[], object]] = {}
    figures: dict[str, Any] = {}
    with scratch_database(), override_settings(**UNBOUNDED):
        project, seeded_s = _seed(waiting)
        asks = {
            "estimate": lambda: services.workload_estimate(
                actor=actor, project=project, spec=probe
            ),
            "dry_run": lambda: services.workload_dry_run(actor=actor, project=project, spec=probe),
        }
        figures["waiting"] = _waiting()
        figures["allocated"] = Allocation.objects.filter(released_at__isnull=True).count()
        figures["seeded_s"] = round(seeded_s, 1)
        for kind, ask in asks.items():
            forget_forecast_inputs()
            with override_settings(FORECAST_INPUTS_TTL_S=0):
                base_cpu, base_wall = _per_request(ask)
            with override_settings(FORECAST_INPUTS_TTL_S=3600):
                ask()  # reads the inputs and keeps them: not counted
                cpu, wall = _per_request(ask)
            figures[kind] = {
                "baseline_cpu_s": round(base_cpu, 3),
                "reused_cpu_s": round(cpu, 3),
                "cpu_ratio": _ratio(cpu, base_cpu),
                "baseline_wall_s": round(base_wall, 3),
                "reused_wall_s": round(wall, 3),
                "wall_ratio": _ratio(wall, base_wall),
            }
        forget_forecast_inputs()
    return {
        "suite": "estimates_api",
        "unit": "seconds per request (mean of each kind's requests)",
        "scale": scale,
        "requests": REQUESTS,
        "baseline": "FORECAST_INPUTS_TTL_S=0: the inputs read for every request",
        "figures": figures,
        "ratios": {kind: figures[kind]["cpu_ratio"] for kind in asks},
        "peak_rss_mb": peak_rss_mb(),
        "engine": engine_build(),
    }
