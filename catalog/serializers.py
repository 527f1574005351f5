"""Response shapes of the catalog endpoints (no logic here)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog import services
from catalog.models import Offering, PricePlan


class PricePlanSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    price_per_gpu_hour_minor = serializers.IntegerField(
        read_only=True, help_text="Per GPU-hour, in minor units of `currency` (cents for USD)."
    )

    class Meta:
        model = PricePlan
        fields = ["id", "region", "plan", "price_per_gpu_hour_minor", "currency"]
        read_only_fields = fields


class GpuModelFreeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    gpu_model = serializers.CharField()
    free_gpus = serializers.IntegerField()


class AvailabilitySerializer(serializers.Serializer):  # type: ignore[type-arg]
    region = serializers.CharField()
    free_gpus = serializers.IntegerField(help_text="Free schedulable GPUs of its models now.")
    gpu_models = GpuModelFreeSerializer(many=True)
    units_available = serializers.IntegerField(
        help_text="How many of its units fit now: instances, training nodes, replicas, or"
        " reservable GPUs."
    )


class OfferingSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    gpu_models = serializers.ListField(child=serializers.CharField(), read_only=True)
    price_plans = serializers.SerializerMethodField()
    availability = serializers.SerializerMethodField()

    class Meta:
        model = Offering
        fields = [*services.DEFINITION_FIELDS, "active", "price_plans", "availability"]
        read_only_fields = fields

    def _region(self) -> str | None:
        region: str | None = self.context.get("region")
        return region

    @extend_schema_field(PricePlanSerializer(many=True))
    def get_price_plans(self, offering: Offering) -> list[dict[str, Any]]:
        plans = [p for p in offering.price_plans.all() if self._region() in (None, p.region)]
        return list(PricePlanSerializer(plans, many=True).data)

    @extend_schema_field(AvailabilitySerializer(many=True))
    def get_availability(self, offering: Offering) -> list[dict[str, Any]]:
        rows = self.context["free"].availability(offering)
        return [row for row in rows if self._region() in (None, row["region"])]
