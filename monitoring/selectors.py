"""The fleet and the queues as they are now, read from the apps' tables for a scrape. Each
reading is a few grouped queries whatever the fleet's size (a scrape every 15 to 30 s)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass

from django.db.models import Count, OuterRef, Subquery, Sum

from inventory.lifecycle import NodeState
from inventory.models import Cluster, Gpu
from inventory.selectors import nodes_in_service
from monitoring.models import MetricCounter, MetricHistogram
from scheduler.models import WAITING_STATUSES, Allocation, Workload, WorkloadWait
from tenants.models import Project, Quota

# A GPU's state for ``neocloud_cluster_gpus``; the first that applies wins.
FAILED, ALLOCATED, CORDONED, PROVISIONING, FREE = (
    "failed",
    "allocated",
    "cordoned",
    "provisioning",
    "free",
)
CORDONED_NODES = frozenset({NodeState.CORDONED, NodeState.DRAINING, NodeState.MAINTENANCE})
NOT_YET_NODES = frozenset({NodeState.REGISTERED, NodeState.PROVISIONING})
NO_REASON = "none"  # waiting, and no cycle has said why yet


def cluster_slugs() -> dict[str, str]:
    return {str(pk): slug for pk, slug in Cluster.objects.values_list("pk", "slug")}


def pending_workloads() -> Counter[tuple[str, str, str]]:
    """Waiting workloads by (cluster id, queue, the last cycle's pending-reason code)."""
    code = WorkloadWait.objects.filter(workload_id=OuterRef("pk")).values("code")[:1]
    rows = (
        Workload.objects.filter(status__in=WAITING_STATUSES)
        .annotate(reason=Subquery(code))
        .values("cluster_id", "project_id", "reason")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return Counter(
        {
            (str(r["cluster_id"]), str(r["project_id"]), r["reason"] or NO_REASON): r["n"]
            for r in rows
        }
    )


def gpus_by_state() -> Counter[tuple[str, str, str]]:
    """GPUs of the nodes in service by (cluster id, GPU model, state): ``failed`` (its node
    failed or it is unhealthy), ``allocated`` (a live allocation holds any share of it),
    ``cordoned`` (cordoned, draining or in maintenance), ``provisioning`` (not ready yet),
    ``free``."""
    held: set[tuple[str, int]] = set()
    for placements in Allocation.objects.filter(released_at__isnull=True).values_list(
        "placements", flat=True
    ):
        for placement in placements:
            held.update((str(placement["node_id"]), gpu) for gpu in placement["gpus"])
    counts: Counter[tuple[str, str, str]] = Counter()
    gpus = Gpu.objects.filter(node__in=nodes_in_service()).values_list(
        "node_id", "node__cluster_id", "node__gpu_model_id", "node__state", "index", "healthy"
    )
    for node_id, cluster_id, model, node_state, index, healthy in gpus:
        if node_state == NodeState.FAILED or not healthy:
            state = FAILED
        elif (str(node_id), index) in held:
            state = ALLOCATED
        elif node_state in CORDONED_NODES:
            state = CORDONED
        elif node_state in NOT_YET_NODES:
            state = PROVISIONING
        else:
            state = FREE
        counts[str(cluster_id), model or "none", state] += 1
    return counts


def nodes_by_state() -> Counter[tuple[str, str]]:
    rows = nodes_in_service().values("cluster_id", "state").annotate(n=Count("pk")).order_by()
    return Counter({(str(r["cluster_id"]), r["state"]): r["n"] for r in rows})


@dataclass(frozen=True)
class GpuUtilisation:
    cluster_id: str
    node: str
    gpu: int
    percent: float


def gpu_utilisation() -> list[GpuUtilisation]:
    """What each node's agent last reported of its GPUs (only those that report)."""
    rows = Gpu.objects.filter(
        node__in=nodes_in_service(), utilization_pct__isnull=False
    ).values_list("node__cluster_id", "node__name", "index", "utilization_pct")
    return [GpuUtilisation(str(c), n, i, p or 0.0) for c, n, i, p in rows]


def queue_usage() -> dict[tuple[str, str], float]:
    """GPUs (fractions included) held now by (queue, GPU model)."""
    rows = (
        Allocation.objects.filter(released_at__isnull=True)
        .values("project_id", "gpu_model")
        .annotate(milli=Sum("gpu_milli"))
        .order_by()
    )
    return {(str(r["project_id"]), r["gpu_model"] or "none"): r["milli"] / 1000 for r in rows}


def queue_nominal_quota() -> dict[tuple[str, str], int]:
    """Each queue's nominal quota by (queue, GPU model): its project's quota."""
    rows = Quota.objects.filter(project__isnull=False).values_list(
        "project_id", "gpu_model", "max_gpus"
    )
    return {(str(p), m): g for p, m, g in rows}


def queue_names() -> list[tuple[str, str, str]]:
    """(queue, organization slug, project slug) of every project: what ``queue`` stands for."""
    rows = Project.objects.values_list("pk", "organization__slug", "slug").order_by("pk")
    return [(str(pk), org, slug) for pk, org, slug in rows]


def stored_counters() -> dict[str, list[tuple[dict[str, str], float]]]:
    """The totals folded from the log, by name: each series' labels and value."""
    series: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for name, labels, value in MetricCounter.objects.order_by("name", "labels_json").values_list(
        "name", "labels_json", "value"
    ):
        series[name].append((json.loads(labels), value))
    return series


def stored_histograms() -> dict[str, list[MetricHistogram]]:
    series: dict[str, list[MetricHistogram]] = defaultdict(list)
    for row in MetricHistogram.objects.order_by("name", "labels_json"):
        series[row.name].append(row)
    return series
