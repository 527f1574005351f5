"""The fleet tables, kept from the fleet streams inside each append."""

from __future__ import annotations

from collections.abc import Iterable

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from inventory import events as ev
from inventory.lifecycle import NodeState
from inventory.models import Cluster, Gpu, GpuModel, Node, ProvisioningStep, Rack, Region


class Fleet(projections.Projection):
    name = "inventory.fleet"
    models = (GpuModel, Region, Cluster, Rack, Node, Gpu, ProvisioningStep)
    # Telemetry: heartbeats are not events.
    operational = {
        Node: ("last_heartbeat_at", "agent_info", "agent_address", "inventory_mismatch"),
        Gpu: ("utilization_pct", "memory_used_mib", "telemetry_at", "idle_since"),
    }

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        versions: dict[tuple[str, str], int] = {}
        for event in events:
            self.apply(event)
            versions[(event.stream_type, event.stream_id)] = event.version
        # The stream's version: what the next write must expect.
        for (stream_type, stream_id), version in versions.items():
            if stream_type == ev.NODE_STREAM:
                Node.objects.filter(id=stream_id).update(version=version)
            elif stream_type == ev.CLUSTER_STREAM:
                Cluster.objects.filter(id=stream_id).update(version=version)

    @handles(ev.GpuModelDefined)
    def gpu_model_defined(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        GpuModel.objects.update_or_create(slug=data.pop("slug"), defaults=data)

    @handles(ev.RegionDefined)
    def region_defined(self, event: RecordedEvent) -> None:
        Region.objects.update_or_create(
            slug=event.data["slug"], defaults={"name": event.data["name"]}
        )

    @handles(ev.ClusterDefined)
    def cluster_defined(self, event: RecordedEvent) -> None:
        data = event.data
        Cluster.objects.update_or_create(
            id=data["cluster_id"],
            defaults={"region_id": data["region"], "slug": data["slug"], "name": data["name"]},
            create_defaults={
                "region_id": data["region"],
                "slug": data["slug"],
                "name": data["name"],
                "version": event.version,
                "created_at": event.recorded_at,
            },
        )

    @handles(ev.RackDefined)
    def rack_defined(self, event: RecordedEvent) -> None:
        data = event.data
        Rack.objects.update_or_create(
            id=data["rack_id"],
            defaults={
                "cluster_id": event.stream_id,
                "name": data["name"],
                "leaf_switch": data["leaf_switch"],
                "spine": data["spine"],
            },
        )

    @handles(ev.NodeRegistered)
    def node_registered(self, event: RecordedEvent) -> None:
        data = event.data
        node = Node.objects.create(
            id=data["node_id"],
            cluster_id=data["cluster_id"],
            rack_id=data["rack_id"],
            name=data["name"],
            gpu_model_id=data["gpu_model"],
            cpu_milli=data["cpu_milli"],
            memory_mib=data["memory_mib"],
            state=NodeState.REGISTERED,
            state_changed_at=event.recorded_at,
            token_hash=data["token_hash"],
            driver=data.get("driver", ""),
            version=event.version,
            created_at=event.recorded_at,
        )
        Gpu.objects.bulk_create(
            Gpu(
                id=gpu["gpu_id"],
                node=node,
                index=gpu["index"],
                uuid=gpu["uuid"],
                nvlink_domain=gpu["nvlink_domain"],
            )
            for gpu in data["gpus"]
        )

    @handles(ev.NodeRespecified)
    def node_respecified(self, event: RecordedEvent) -> None:
        Node.objects.filter(id=event.stream_id).update(**event.data)

    @handles(ev.NodeTokenRotated)
    def node_token_rotated(self, event: RecordedEvent) -> None:
        Node.objects.filter(id=event.stream_id).update(token_hash=event.data["token_hash"])

    @handles(ev.NodeStateChanged)
    def node_state_changed(self, event: RecordedEvent) -> None:
        Node.objects.filter(id=event.stream_id).update(
            state=event.data["to_state"],
            state_reason=event.data["reason"],
            state_changed_at=event.recorded_at,
        )

    @handles(ev.ProvisioningStarted)
    def provisioning_started(self, event: RecordedEvent) -> None:
        Node.objects.filter(id=event.stream_id).update(provisioning_run=event.data["run"])

    @handles(ev.ProvisioningStepStarted)
    def step_started(self, event: RecordedEvent) -> None:
        data = event.data
        ProvisioningStep.objects.update_or_create(
            node_id=event.stream_id,
            run=data["run"],
            phase=data["phase"],
            step=data["step"],
            defaults={
                "status": "running",
                "attempts": data["attempt"],
                "updated_at": event.recorded_at,
            },
        )

    @handles(ev.ProvisioningStepSucceeded)
    def step_succeeded(self, event: RecordedEvent) -> None:
        data = event.data
        ProvisioningStep.objects.filter(
            node_id=event.stream_id, run=data["run"], phase=data["phase"], step=data["step"]
        ).update(
            status="succeeded", details=data["details"], last_error="", updated_at=event.recorded_at
        )

    @handles(ev.ProvisioningStepFailed)
    def step_failed(self, event: RecordedEvent) -> None:
        data = event.data
        ProvisioningStep.objects.filter(
            node_id=event.stream_id, run=data["run"], phase=data["phase"], step=data["step"]
        ).update(
            status="failed" if data["final"] else "retrying",
            last_error=data["error"],
            updated_at=event.recorded_at,
        )

    @handles(ev.GpuFailed)
    def gpu_failed(self, event: RecordedEvent) -> None:
        Gpu.objects.filter(node_id=event.stream_id, index=event.data["index"]).update(
            healthy=False, fault=event.data["reason"]
        )

    @handles(ev.GpuRecovered)
    def gpu_recovered(self, event: RecordedEvent) -> None:
        Gpu.objects.filter(node_id=event.stream_id, index=event.data["index"]).update(
            healthy=True, fault=""
        )


projections.register(Fleet(), synchronous=True)
