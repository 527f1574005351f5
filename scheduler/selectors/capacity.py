"""The capacity of a cluster as the scheduler sees it: allocated, free, free but unable to
serve a shape."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from inventory.lifecycle import NodeState
from inventory.models import Cluster
from inventory.selectors import nodes_in_service
from scheduler.models import Allocation

TYPICAL_SHAPES = (1, 2, 4, 8)  # GPUs per node most requests ask for


def _live_allocations(cluster_id: uuid.UUID) -> QuerySet[Allocation]:
    return Allocation.objects.filter(cluster_id=cluster_id, released_at__isnull=True)


def gpus_held(cluster_id: uuid.UUID) -> dict[str, set[int]]:
    """GPU indexes per node id held by live allocations (a GPU holding any share counts)."""
    taken: dict[str, set[int]] = defaultdict(set)
    for allocation in _live_allocations(cluster_id):
        for placement in allocation.placements:
            taken[str(placement["node_id"])].update(placement["gpus"])
    return dict(taken)


def cluster_allocations(slug: str | None = None) -> list[dict[str, Any]]:
    """``cluster_allocation`` of every cluster by slug, or of the one named ``slug``."""
    clusters = Cluster.objects.order_by("slug")
    if slug:
        clusters = clusters.filter(slug=slug)
    return [cluster_allocation(c) for c in clusters]


def cluster_allocation(cluster: Cluster) -> dict[str, Any]:
    """Per GPU model: GPUs in total, allocated, free on schedulable nodes, and for each
    typical shape the free GPUs that cannot serve it (too few free on their node)."""
    held: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for allocation in _live_allocations(cluster.pk):
        for placement in allocation.placements:
            for gpu in placement["gpus"]:
                held[str(placement["node_id"])][gpu] += placement["gpu_milli"] / 1000
    models: dict[str, dict[str, Any]] = {}
    nodes = nodes_in_service().filter(cluster=cluster)
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
