"""Request validation and response shapes of the fleet endpoints."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.models import Cluster, Gpu, GpuModel, Node, ProvisioningStep, Rack, Region
from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    StrictType,
    StrictUUIDField,
)


class GpuModelSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = GpuModel
        fields = [
            "slug",
            "name",
            "vendor",
            "memory_gib",
            "interconnect",
            "shareable",
            "mig_profiles",
        ]
        read_only_fields = fields


class RegionSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Region
        fields = ["slug", "name"]
        read_only_fields = fields


class RackSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Rack
        fields = ["id", "name", "leaf_switch", "spine"]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    racks = RackSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = ["id", "slug", "name", "region", "racks", "created_at"]
        read_only_fields = fields


class GpuSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Gpu
        fields = [
            "index",
            "uuid",
            "nvlink_domain",
            "healthy",
            "fault",
            "utilization_pct",
            "memory_used_mib",
            "idle_since",
            "telemetry_at",
        ]
        read_only_fields = fields


class ProvisioningStepSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = ProvisioningStep
        fields = [
            "run",
            "phase",
            "step",
            "status",
            "attempts",
            "last_error",
            "details",
            "updated_at",
        ]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    gpus = GpuSerializer(many=True, read_only=True)
    rack = serializers.CharField(source="rack.name", read_only=True, allow_null=True)
    cluster = serializers.CharField(source="cluster.slug", read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "cluster",
            "rack",
            "gpu_model",
            "cpu_milli",
            "memory_mib",
            "state",
            "state_reason",
            "state_changed_at",
            "provisioning_run",
            "last_heartbeat_at",
            "gpus",
            "created_at",
        ]
        read_only_fields = fields


class AgentInfoSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The node agent as its last heartbeat described itself."""

    version = serializers.CharField()
    runtime = serializers.CharField()
    address = serializers.CharField()
    fake_gpus = serializers.BooleanField()
    cgroups = serializers.BooleanField()
    cgroups_note = serializers.CharField()
    volumes_disk_gb = serializers.IntegerField(default=0, help_text="offered to local volumes")


class NodeDetailSerializer(NodeSerializer):
    steps = serializers.SerializerMethodField()
    agent = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "agent", "inventory_mismatch", "steps"]
        read_only_fields = fields

    @extend_schema_field(AgentInfoSerializer(allow_null=True))
    def get_agent(self, node: Node) -> dict[str, object] | None:
        """None until an agent sent a full report."""
        return dict(AgentInfoSerializer(node.agent_info).data) if node.agent_info else None

    @extend_schema_field(ProvisioningStepSerializer(many=True))
    def get_steps(self, node: Node) -> list[dict[str, object]]:
        """The steps of the node's latest run."""
        steps = node.steps.filter(run=node.provisioning_run)
        return list(ProvisioningStepSerializer(steps, many=True).data)


class NodeActionSerializer(RequestSerializer):
    reason = StrictCharField(max_length=300, required=False, default="", allow_blank=True)


class NodeTokenSerializer(serializers.Serializer):  # type: ignore[type-arg]
    token = serializers.CharField(help_text="The node agent's token, shown once.")


# Bounds of what an agent reports: no GPU has a TiB of memory (yet).
MAX_GPU_MEMORY_MIB = 1 << 20
AGENT_RUNTIMES = ["process", "podman", "docker"]


class GpuReportSerializer(serializers.Serializer):  # type: ignore[type-arg]
    index = StrictIntegerField(min_value=0, max_value=255)
    healthy = StrictBooleanField()
    reason = StrictCharField(max_length=300, required=False, default="", allow_blank=True)
    uuid = StrictCharField(max_length=64, required=False, default="", allow_blank=True)
    model = StrictCharField(max_length=100, required=False, default="", allow_blank=True)
    memory_mib = StrictIntegerField(
        min_value=0, max_value=MAX_GPU_MEMORY_MIB, required=False, default=None
    )
    utilization_pct = StrictFloatField(min_value=0, max_value=100, required=False, default=None)
    memory_used_mib = StrictIntegerField(
        min_value=0, max_value=MAX_GPU_MEMORY_MIB, required=False, default=None
    )


class AgentReportSerializer(StrictType, serializers.Serializer):  # type: ignore[type-arg]
    """Only a JSON object (a string or a list is the agent's bug)."""

    accepts = (dict,)
    expected = "an object"

    version = StrictCharField(max_length=64, required=False, default="", allow_blank=True)
    runtime = StrictChoiceField(choices=AGENT_RUNTIMES, required=False, default="process")
    address = StrictCharField(
        max_length=255,
        required=False,
        default="",
        allow_blank=True,
        validators=[
            RegexValidator(
                r"^[A-Za-z0-9.:\-\[\]]*$",
                "An IP address or host name.",
                code="invalid_address",
            )
        ],
    )
    fake_gpus = StrictBooleanField(required=False, default=False)
    cgroups = StrictBooleanField(required=False, default=False)
    cgroups_note = StrictCharField(max_length=300, required=False, default="", allow_blank=True)
    volumes_disk_gb = StrictIntegerField(
        min_value=0, max_value=1 << 40, required=False, default=0, help_text="for local volumes"
    )


class VolumeUsageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = StrictUUIDField()
    used_bytes = StrictIntegerField(min_value=0, max_value=1 << 62)


class HeartbeatSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A node agent's report. With ``agent`` it is a full report (every GPU of the node),
    checked against the fleet; without, it may name only some GPUs (older agents).
    ``volumes``: what the volumes its runs mount hold, as it last measured them."""

    agent = AgentReportSerializer(required=False, default=None)
    gpus = GpuReportSerializer(many=True, max_length=256, required=False, default=list)  # type: ignore[call-arg]
    volumes = VolumeUsageSerializer(many=True, max_length=1024, required=False, default=list)  # type: ignore[call-arg]

    def validate_gpus(self, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen: set[int] = set()
        for gpu in gpus:
            if gpu["index"] in seen:
                raise serializers.ValidationError(
                    f"GPU {gpu['index']} is given twice.", code="duplicate"
                )
            seen.add(gpu["index"])
        return gpus


class HeartbeatAckSerializer(serializers.Serializer):  # type: ignore[type-arg]
    state = serializers.CharField()
    received_at = serializers.DateTimeField()
    accepting_work = serializers.BooleanField(
        help_text="The node takes new placements: it is ready and matches the fleet."
    )
    mismatch = serializers.CharField(
        help_text="What the agent's last full report found different from the fleet."
    )
