"""The facts of the fleet that new work is checked against: its GPU models, the priority
classes, the clusters and the shape of their nodes. Read once per change, not per request.

They change only with the events their projections apply (``CHANGED_BY``): the newest of
those in the log is their version. Each process keeps the facts of the last version it saw;
a request reads the version (one statement, an index probe per event type) and reads the
facts again only when it moved. This holds across processes (each compares with the log)
and under replay (a replay rebuilds the same tables from the same log, so the facts of a
version stay its facts). The version is read before the facts: facts a commit made newer
meanwhile are kept under the older version, and the next change reads them again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from events import store
from inventory import events as fleet_events
from inventory.models import Cluster, GpuModel
from inventory.selectors import nodes_in_service
from scheduler import events as ev
from scheduler.models import PriorityClass

CHANGED_BY = frozenset(
    {
        fleet_events.GpuModelDefined.event_type,
        fleet_events.ClusterDefined.event_type,
        fleet_events.NodeRegistered.event_type,
        fleet_events.NodeRespecified.event_type,
        fleet_events.NodeStateChanged.event_type,
        ev.PriorityClassDefined.event_type,
    }
)


@dataclass(frozen=True)
class NodeShape:
    """What a node in service can hold at most."""

    gpu_model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    driver: str = ""  # its own provisioning driver ("": the deployment's)


@dataclass(frozen=True)
class FleetFacts:
    """``gpu_models``: slug -> shareable; ``priority_classes``: name -> (value, preemptible),
    as operators defined them; ``nodes``: the GPU nodes in service of each cluster."""

    gpu_models: Mapping[str, bool]
    priority_classes: Mapping[str, tuple[int, bool]]
    clusters: Mapping[uuid.UUID, Cluster]
    nodes: Mapping[uuid.UUID, tuple[NodeShape, ...]]

    def clusters_with(self, gpu_models: tuple[str, ...], region: str | None) -> list[Cluster]:
        """Clusters holding nodes of one of ``gpu_models`` (none: any GPU), in ``region`` if
        given: most such GPUs first, then by id."""
        totals: dict[uuid.UUID, int] = {}
        for cluster_id, shapes in self.nodes.items():
            cluster = self.clusters[cluster_id]
            if region and cluster.region_id != region:
                continue
            matching = [s for s in shapes if not gpu_models or s.gpu_model in gpu_models]
            if matching:
                totals[cluster_id] = sum(s.gpus for s in matching)
        ranked = sorted(totals, key=lambda c: (-totals[c], str(c)))
        return [self.clusters[c] for c in ranked]


# The version and facts last read in this process; one tuple, replaced whole, so the threads
# of a worker read a consistent pair without a lock.
_known: tuple[tuple[int, datetime], FleetFacts] | None = None


def fleet_facts() -> FleetFacts:
    """The facts as of the newest fleet event: one query when none happened since the last
    call in this process, four more when one did (and always, while the log has none)."""
    global _known
    version = store.newest_of_types(CHANGED_BY)
    known = _known
    if known is not None and known[0] == version:
        return known[1]
    facts = _read()
    if version is not None:
        _known = (version, facts)
    return facts


def _read() -> FleetFacts:
    clusters = {c.pk: c for c in Cluster.objects.all()}
    nodes: dict[uuid.UUID, list[NodeShape]] = {}
    rows = (
        nodes_in_service()
        .filter(gpu_model__isnull=False)
        .annotate(gpu_count=Count("gpus"))
        .values_list("cluster_id", "gpu_model_id", "gpu_count", "cpu_milli", "memory_mib", "driver")
        .order_by()
    )
    for cluster_id, model, gpus, cpu_milli, memory_mib, driver in rows:
        shape = NodeShape(model, gpus, cpu_milli, memory_mib, driver)
        nodes.setdefault(cluster_id, []).append(shape)
    return FleetFacts(
        gpu_models=dict(GpuModel.objects.values_list("slug", "shareable")),
        priority_classes={
            p.name: (p.value, p.preemptible) for p in PriorityClass.objects.order_by("name")
        },
        clusters=clusters,
        nodes={cluster_id: tuple(shapes) for cluster_id, shapes in nodes.items()},
    )
