"""Request validation and response shapes of the order endpoints (no logic here)."""

from __future__ import annotations

from rest_framework import serializers

from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import (
    StrictCharField,
    StrictChoiceField,
    StrictDateTimeField,
    StrictIntegerField,
    StrictPrimaryKeyRelatedField,
    StrictSlugField,
)
from orders.models import Order, OrderStep
from scheduler.serializers import ProgramFields
from scheduler.specs import MAX_RUNTIME_S, PROGRAM_FIELDS, PricePlan
from tenants.models import Project


class OrderStepSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = OrderStep
        fields = ["status", "actor", "reason", "at"]
        read_only_fields = fields


class OrderSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    steps = OrderStepSerializer(many=True, read_only=True)
    gpu_model = serializers.CharField(read_only=True, help_text="As asked; blank: any.")
    gpu_models = serializers.ListField(child=serializers.CharField(), read_only=True)
    price_per_gpu_hour_minor = serializers.IntegerField(
        read_only=True, help_text="The price when ordered, in minor units of `currency`."
    )
    estimated_cost_minor = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="Price x GPUs x runtime estimate (or the reserved window), in minor units.",
    )

    class Meta:
        model = Order
        fields = [
            "id",
            "organization",
            "project",
            "offering",
            "kind",
            "region",
            "price_plan",
            "gpu_model",
            "gpu_models",
            "quantity",
            "gpus_per_node",
            "nodes",
            "gpu_milli",
            "gpus",
            "runtime_estimate_s",
            "starts_at",
            "ends_at",
            "name",
            *PROGRAM_FIELDS,
            "price_per_gpu_hour_minor",
            "currency",
            "estimated_cost_minor",
            "status",
            "status_reason",
            "needs_approval",
            "workload_id",
            "reservation_id",
            "submitted_by",
            "created_at",
            "updated_at",
            "steps",
        ]
        read_only_fields = fields


class OrderCreateSerializer(ProgramFields):
    project = StrictPrimaryKeyRelatedField(queryset=Project.objects.none())
    offering = StrictSlugField(max_length=64)
    region = StrictSlugField(max_length=64)
    price_plan = StrictChoiceField(choices=[p.value for p in PricePlan])
    quantity = StrictIntegerField(
        min_value=1,
        max_value=100_000,
        default=1,
        help_text="Units of the offering: 1 instance, training nodes, inference replicas, or"
        " reserved GPUs.",
    )
    gpu_model = StrictSlugField(max_length=64, required=False, allow_null=True, default=None)
    runtime_estimate_s = StrictIntegerField(
        min_value=1, max_value=MAX_RUNTIME_S, required=False, allow_null=True, default=None
    )
    starts_at = StrictDateTimeField(required=False, allow_null=True, default=None)
    ends_at = StrictDateTimeField(required=False, allow_null=True, default=None)
    name = StrictCharField(max_length=128, required=False, default="", allow_blank=True)


class OrderCancelSerializer(RequestSerializer):
    reason = StrictCharField(max_length=500, required=False, default="", allow_blank=True)
