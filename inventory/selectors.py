"""Fleet reads: the topology tree and the capacity view."""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet

from events import store
from inventory import events as ev
from inventory.lifecycle import SCHEDULABLE, NodeState
from inventory.models import Cluster, Gpu, Node

# GPUs of nodes in these states are gone or going: not counted as healthy capacity.
LOST = frozenset({NodeState.FAILED, NodeState.DECOMMISSIONED})
# Nodes in these states have left the fleet for good: no work is placed on them again.
RETIRED = frozenset({NodeState.DECOMMISSIONED})


def nodes_in_service() -> QuerySet[Node]:
    """Nodes that are or may again be capacity: every one not retired (a failed or drained
    node may come back)."""
    return Node.objects.exclude(state__in=RETIRED)


def nodes_with_capacity() -> QuerySet[Node]:
    """Nodes whose GPUs count as capacity now: neither retired nor failed (``LOST``)."""
    return Node.objects.exclude(state__in=LOST)


def node_failed_at(node_id: uuid.UUID) -> datetime | None:
    """When the node last became failed (its row keeps only its latest state change), or
    None if it never did."""
    failed = [
        event.recorded_at
        for event in store.read_stream(ev.NODE_STREAM, str(node_id))
        if event.type == ev.NodeStateChanged.event_type
        and event.data["to_state"] == NodeState.FAILED
    ]
    return failed[-1] if failed else None


def cluster_ids() -> list[uuid.UUID]:
    return list(Cluster.objects.values_list("id", flat=True))


def _nodes(cluster: Cluster) -> list[Node]:
    return list(
        Node.objects.filter(cluster=cluster)
        .select_related("rack")
        .prefetch_related(Prefetch("gpus", queryset=Gpu.objects.order_by("index")))
        .order_by("rack__name", "name")
    )


def cluster_topology(cluster: Cluster) -> dict[str, Any]:
    """cluster → spine → leaf (rack) → node → NVLink domain → GPU, as nested dicts."""
    spines: dict[str, dict[str, Any]] = {}
    for node in _nodes(cluster):
        rack = node.rack
        spine_name = rack.spine if rack else ""
        spine = spines.setdefault(spine_name, {"spine": spine_name, "racks": {}})
        rack_key = rack.name if rack else ""
        rack_entry = spine["racks"].setdefault(
            rack_key,
            {
                "rack": rack_key,
                "leaf_switch": rack.leaf_switch if rack else "",
                "nodes": [],
            },
        )
        domains: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for gpu in node.gpus.all():
            domains[gpu.nvlink_domain].append(
                {"index": gpu.index, "uuid": gpu.uuid, "healthy": gpu.healthy}
            )
        rack_entry["nodes"].append(
            {
                "id": str(node.pk),
                "name": node.name,
                "state": node.state,
                "gpu_model": node.gpu_model_id,
                "nvlink_domains": [
                    {"domain": domain, "gpus": gpus} for domain, gpus in sorted(domains.items())
                ],
            }
        )
    return {
        "cluster": cluster.slug,
        "spines": [
            {"spine": spine["spine"], "racks": list(spine["racks"].values())}
            for spine in spines.values()
        ],
    }


def cluster_capacity(cluster: Cluster) -> dict[str, Any]:
    """Per GPU model and per node: GPUs in total, healthy, and schedulable now (healthy on a
    ready node). Allocated and fragmentation figures join when the scheduler records
    allocations."""
    by_model: dict[str, dict[str, int]] = defaultdict(
        lambda: {"total": 0, "healthy": 0, "schedulable": 0}
    )
    nodes = []
    for node in _nodes(cluster):
        gpus = list(node.gpus.all())
        healthy = 0 if node.state in LOST else sum(g.healthy for g in gpus)
        schedulable = healthy if node.state in SCHEDULABLE else 0
        model = node.gpu_model_id or "none"
        figures = by_model[model]
        figures["total"] += len(gpus)
        figures["healthy"] += healthy
        figures["schedulable"] += schedulable
        nodes.append(
            {
                "id": str(node.pk),
                "name": node.name,
                "rack": node.rack.name if node.rack else "",
                "state": node.state,
                "gpu_model": node.gpu_model_id,
                "total": len(gpus),
                "healthy": healthy,
                "schedulable": schedulable,
                "cpu_milli": node.cpu_milli,
                "memory_mib": node.memory_mib,
            }
        )
    return {
        "cluster": cluster.slug,
        "gpu_models": [{"gpu_model": m, **f} for m, f in sorted(by_model.items())],
        "nodes": nodes,
    }
