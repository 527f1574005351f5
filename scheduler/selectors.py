"""Read models of scheduling: queues with their usage against quota, and the capacity of a
cluster as the scheduler sees it (allocated, free, free but unable to serve a shape)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db.models import Count

from inventory.lifecycle import NodeState
from inventory.models import Cluster, Node
from scheduler.models import HOLDING_STATUSES, WAITING_STATUSES, Allocation, Queue, Workload
from scheduler.services import quota_limit
from tenants.models import Project

TYPICAL_SHAPES = (1, 2, 4, 8)  # GPUs per node most requests ask for


def queues_of(projects: Iterable[Project]) -> list[dict[str, Any]]:
    projects = list(projects)
    ids = [p.pk for p in projects]
    configured = {q.project_id: q for q in Queue.objects.filter(project_id__in=ids)}
    counts: dict[tuple[Any, str], int] = {
        (row["project_id"], row["status"]): row["n"]
        for row in Workload.objects.filter(project_id__in=ids)
        .values("project_id", "status")
        .annotate(n=Count("id"))
    }
    used: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for allocation in Allocation.objects.filter(project_id__in=ids, released_at__isnull=True):
        used[allocation.project_id][allocation.gpu_model] += allocation.gpu_milli / 1000
    result = []
    for project in projects:
        queue = configured.get(project.pk)
        models = sorted(set(used[project.pk]))
        result.append(
            {
                "project": project.pk,
                "organization": project.organization_id,
                "cohort": queue.cohort if queue else f"org-{project.organization_id}",
                "borrowing_limit": queue.borrowing_limit if queue else None,
                "lending_limit": queue.lending_limit if queue else None,
                "weight": queue.weight if queue else 1.0,
                "depth": sum(counts.get((project.pk, s), 0) for s in WAITING_STATUSES),
                "running": sum(counts.get((project.pk, s), 0) for s in HOLDING_STATUSES),
                "usage": [
                    {
                        "gpu_model": model,
                        "used": used[project.pk][model],
                        "quota": quota_limit(project, model),
                    }
                    for model in models
                ],
            }
        )
    return result


def cluster_allocation(cluster: Cluster) -> dict[str, Any]:
    """Per GPU model: GPUs in total, allocated, free on schedulable nodes, and for each
    typical shape the free GPUs that cannot serve it (too few free on their node)."""
    held: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for allocation in Allocation.objects.filter(cluster_id=cluster.pk, released_at__isnull=True):
        for placement in allocation.placements:
            for gpu in placement["gpus"]:
                held[str(placement["node_id"])][gpu] += placement["gpu_milli"] / 1000
    models: dict[str, dict[str, Any]] = {}
    nodes = Node.objects.filter(cluster=cluster).exclude(state=NodeState.DECOMMISSIONED)
    for node in nodes.prefetch_related("gpus"):
        model = node.gpu_model_id or "none"
        figures = models.setdefault(
            model,
            {
                "gpu_model": model,
                "total": 0,
                "allocated": 0.0,
                "free": 0,
                "unschedulable_free": 0,
                "free_unusable_by_shape": {str(s): 0 for s in TYPICAL_SHAPES},
            },
        )
        on_node = held[str(node.pk)]
        gpus = list(node.gpus.all())
        figures["total"] += len(gpus)
        figures["allocated"] += sum(on_node.values())
        whole_free = sum(1 for g in gpus if g.healthy and on_node.get(g.index, 0) == 0)
        if node.state != NodeState.READY:
            figures["unschedulable_free"] += whole_free
            continue
        figures["free"] += whole_free
        for shape in TYPICAL_SHAPES:
            if whole_free < shape:
                figures["free_unusable_by_shape"][str(shape)] += whole_free
    return {
        "cluster": cluster.slug,
        "cluster_id": str(cluster.pk),
        "gpu_models": list(models.values()),
    }
