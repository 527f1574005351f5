"""Applying a fleet through the services, in one transaction: bad input writes nothing.

Importing is idempotent: the services record only what differs, so a second run of the same
file appends no event; a node whose rack, CPU or memory changed records one
``NodeRespecified``. Nothing is ever removed: a node missing from the file stays as it is.

Concurrency: the transaction takes the append lock first, so the fleet cannot change between
the check against it (``plan``) and the writes, and counting the events each service call
appends tells exactly what changed. The price: every other writer waits for the import
(seconds for a thousand nodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import transaction

from events import store
from events.models import Event
from inventory import services
from inventory.fleet_import import plan
from inventory.fleet_import.spec import FleetSpec, NodeSpec
from inventory.models import Cluster, GpuModel, Rack, Region
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor

T = TypeVar("T")


@dataclass
class Tally:
    """What one import did to one kind of thing."""

    new: int = 0
    changed: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        return self.new + self.changed + self.unchanged


@dataclass
class ImportSummary:
    gpu_models: Tally = field(default_factory=Tally)
    regions: Tally = field(default_factory=Tally)
    clusters: Tally = field(default_factory=Tally)
    racks: Tally = field(default_factory=Tally)
    nodes: Tally = field(default_factory=Tally)
    gpus: Tally = field(default_factory=Tally)  # new: on new nodes
    events: int = 0
    dry_run: bool = False

    def rows(self) -> list[tuple[str, Tally]]:
        return [
            ("GPU models", self.gpu_models),
            ("regions", self.regions),
            ("clusters", self.clusters),
            ("racks", self.racks),
            ("nodes", self.nodes),
            ("GPUs", self.gpus),
        ]


def fleet_import(*, actor: Actor, fleet: FleetSpec, dry_run: bool = False) -> ImportSummary:
    """Define every GPU model, region, cluster and rack of ``fleet`` and register its nodes.

    All in one transaction, which takes the append lock first (see the module).
    ``FleetInvalid`` (nothing written) when the file names a GPU model that is nowhere
    defined or changes a registered node's GPUs. ``dry_run`` rolls back at the end: the
    summary says what the import would do. Node tokens are not returned: operators rotate a
    node's token to get one.
    """
    with transaction.atomic():
        store.take_append_lock()
        start = store.head_position()
        interconnects = plan.check_against_fleet(fleet)
        summary = _Applier(actor, start).apply(fleet, interconnects)
        summary.events = Event.objects.filter(position__gt=start).count()
        summary.dry_run = dry_run
        if dry_run:
            transaction.set_rollback(True)
    return summary


class _Applier:
    """Calls the services in order, telling new, changed and unchanged apart by whether the
    call appended (the import holds the append lock: no one else can)."""

    def __init__(self, actor: Actor, head: int) -> None:
        self.actor = actor
        self.head = head
        self.summary = ImportSummary()

    def call(self, tally: Tally, existed: bool, service: Callable[..., T], **kwargs: Any) -> T:
        result = atomic_with_retry(service, actor=self.actor, **kwargs)
        head = store.head_position()
        if head == self.head:
            tally.unchanged += 1
        elif existed:
            tally.changed += 1
        else:
            tally.new += 1
        self.head = head
        return result

    def apply(self, fleet: FleetSpec, interconnects: Mapping[str, str]) -> ImportSummary:
        summary = self.summary
        # 1. GPU models; then every model a node names is a row (defined before, or just now).
        known_models = set(GpuModel.objects.values_list("slug", flat=True))
        for model in fleet.gpu_models:
            self.call(
                summary.gpu_models,
                model.slug in known_models,
                services.gpu_model_define,
                slug=model.slug,
                name=model.name,
                vendor=model.vendor,
                memory_gib=model.memory_gib,
                interconnect=model.interconnect,
                shareable=model.shareable,
                mig_profiles=list(model.mig_profiles),
            )
        models = {model.slug: model for model in GpuModel.objects.all()}
        known_regions = set(Region.objects.values_list("slug", flat=True))
        known_clusters = set(Cluster.objects.values_list("slug", flat=True))
        known_racks = set(Rack.objects.values_list("cluster__slug", "name"))
        # 2. The topology, top down: regions, clusters, their racks, then the nodes.
        for region_spec in fleet.regions:
            region = self.call(
                summary.regions,
                region_spec.slug in known_regions,
                services.region_define,
                slug=region_spec.slug,
                name=region_spec.name,
            )
            for cluster_spec in region_spec.clusters:
                cluster = self.call(
                    summary.clusters,
                    cluster_spec.slug in known_clusters,
                    services.cluster_define,
                    region=region,
                    slug=cluster_spec.slug,
                    name=cluster_spec.name,
                )
                racks: dict[str, Rack] = {}
                for rack_spec in cluster_spec.racks:
                    racks[rack_spec.name] = self.call(
                        summary.racks,
                        (cluster_spec.slug, rack_spec.name) in known_racks,
                        services.rack_define,
                        cluster=cluster,
                        name=rack_spec.name,
                        leaf_switch=rack_spec.leaf_switch,
                        spine=rack_spec.spine,
                    )
                for rack_spec_or_none, node in cluster_spec.all_nodes():
                    rack = racks[rack_spec_or_none.name] if rack_spec_or_none else None
                    self._node(cluster, rack, node, models, interconnects)
        return summary

    def _node(
        self,
        cluster: Cluster,
        rack: Rack | None,
        node: NodeSpec,
        models: Mapping[str, GpuModel],
        interconnects: Mapping[str, str],
    ) -> None:
        gpus = [
            services.GpuSlot(index=index, nvlink_domain=domain)
            for index, domain in enumerate(plan.gpu_domains(node, interconnects))
        ]
        before = self.head
        _, token = atomic_with_retry(
            services.node_register,
            actor=self.actor,
            cluster=cluster,
            name=node.name,
            gpu_model=models[node.gpu_model] if node.gpu_model else None,
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
            gpus=gpus,
            rack=rack,
            driver=node.driver,
        )
        # The token is dropped on purpose: a bulk import prints none (operators rotate one).
        self.head = store.head_position()
        if token is not None:
            self.summary.nodes.new += 1
            self.summary.gpus.new += len(gpus)
            return
        if self.head != before:
            self.summary.nodes.changed += 1
        else:
            self.summary.nodes.unchanged += 1
        self.summary.gpus.unchanged += len(gpus)
