"""Free capacity is not schedulable capacity: per cluster and GPU model, the GPUs there are,
healthy, allocated and free, and for each typical shape how many copies could start now
against how many the free GPUs would hold if they were together.

Read from the scheduler's own view of the cluster (``cluster_view``), with the engine's free
figures (``Capacity``), so the page says what a cycle would find.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from inventory.models import Cluster
from inventory.selectors import LOST, nodes_in_service
from scheduler.engine.capacity import Capacity
from scheduler.engine.fragmentation import ShapeFit, free_whole_by_node, shape_fits
from scheduler.engine.model import Snapshot
from scheduler.models import FragmentationSample
from scheduler.snapshot import cluster_view


@dataclass(frozen=True)
class ModelCapacity:
    """One GPU model of one cluster. ``free``: whole free GPUs on schedulable nodes."""

    cluster_id: uuid.UUID
    cluster: str
    gpu_model: str
    total: int
    healthy: int
    allocated: float
    free: int
    shapes: list[ShapeFit]


def fleet_fragmentation() -> list[ModelCapacity]:
    """``cluster_fragmentation`` of every cluster, by slug (a fixed number of queries per
    cluster, whatever its size)."""
    found: list[ModelCapacity] = []
    for cluster in Cluster.objects.order_by("slug"):
        found.extend(cluster_fragmentation(cluster))
    return found


def cluster_fragmentation(cluster: Cluster) -> list[ModelCapacity]:
    """Per GPU model of the cluster's nodes in service, by model. Total counts every GPU;
    healthy leaves out faulty GPUs and failed nodes; allocated counts shares of a GPU as
    fractions; free and the shapes count only whole GPUs of ready (not cordoned, draining or
    failed) nodes."""
    view = cluster_view(cluster.pk)
    running = tuple(allocation for _, allocation in view.running.values())
    capacity = Capacity(Snapshot(view.nodes, view.faults + running))
    failed = {
        str(pk)
        for pk in nodes_in_service()
        .filter(cluster_id=cluster.pk, state__in=LOST)
        .values_list("pk", flat=True)
    }
    faulty = {p.node: len(p.gpus) for fault in view.faults for p in fault.placements}
    model_of = {node.name: node.gpu_model for node in view.nodes}
    total: dict[str, int] = defaultdict(int)
    healthy: dict[str, int] = defaultdict(int)
    allocated: dict[str, int] = defaultdict(int)  # milli-GPU
    for node in view.nodes:
        if node.gpu_model is None or not node.gpu_count:
            continue
        total[node.gpu_model] += node.gpu_count
        if node.name not in failed:
            healthy[node.gpu_model] += node.gpu_count - faulty.get(node.name, 0)
    for allocation in running:
        for placement in allocation.placements:
            model = model_of.get(placement.node)
            if model is not None:
                allocated[model] += len(placement.gpus) * placement.gpu_milli
    found = []
    for model in sorted(total):
        free_by_node = free_whole_by_node(capacity, model)
        found.append(
            ModelCapacity(
                cluster_id=cluster.pk,
                cluster=cluster.slug,
                gpu_model=model,
                total=total[model],
                healthy=healthy[model],
                allocated=allocated[model] / 1000,
                free=sum(free_by_node),
                shapes=shape_fits(free_by_node),
            )
        )
    return found


def fragmentation_history(since: datetime) -> dict[tuple[uuid.UUID, str], list[dict[str, Any]]]:
    """Samples from ``since`` on, per (cluster id, GPU model), oldest first (one query)."""
    history: dict[tuple[uuid.UUID, str], list[dict[str, Any]]] = defaultdict(list)
    rows = (
        FragmentationSample.objects.filter(at__gte=since)
        .order_by("cluster_id", "gpu_model", "at", "shape")
        .values("cluster_id", "gpu_model", "shape", "startable", "would_hold", "free", "at")
    )
    for row in rows:
        history[(row["cluster_id"], row["gpu_model"])].append(dict(row))
    return dict(history)
