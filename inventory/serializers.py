"""Request validation and response shapes of the fleet endpoints."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.models import Cluster, Gpu, GpuModel, Node, ProvisioningStep, Rack, Region
from neocloud.api.fields import (
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
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
        fields = ["index", "uuid", "nvlink_domain", "healthy", "fault"]
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


class NodeDetailSerializer(NodeSerializer):
    steps = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "steps"]
        read_only_fields = fields

    @extend_schema_field(ProvisioningStepSerializer(many=True))
    def get_steps(self, node: Node) -> list[dict[str, object]]:
        """The steps of the node's latest run."""
        steps = node.steps.filter(run=node.provisioning_run)
        return list(ProvisioningStepSerializer(steps, many=True).data)


class NodeActionSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = StrictCharField(max_length=300, required=False, default="", allow_blank=True)


class NodeTokenSerializer(serializers.Serializer):  # type: ignore[type-arg]
    token = serializers.CharField(help_text="The node agent's token, shown once.")


class GpuReportSerializer(serializers.Serializer):  # type: ignore[type-arg]
    index = StrictIntegerField(min_value=0, max_value=255)
    healthy = StrictBooleanField()
    reason = StrictCharField(max_length=300, required=False, default="", allow_blank=True)


class HeartbeatSerializer(serializers.Serializer):  # type: ignore[type-arg]
    gpus = GpuReportSerializer(many=True, max_length=256, required=False, default=list)  # type: ignore[call-arg]


class HeartbeatAckSerializer(serializers.Serializer):  # type: ignore[type-arg]
    state = serializers.CharField()
    received_at = serializers.DateTimeField()
