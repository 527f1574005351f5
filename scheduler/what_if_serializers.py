"""API shapes of the what-if: a workload's estimate per GPU model before it is submitted, and
an operator's drain or reservation previewed against the waiting work's estimates."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import (
    StrictListField,
    StrictUUIDField,
)
from scheduler.engine.forecast import StartEstimate
from scheduler.serializers import ReservationCreateSerializer
from scheduler.services.what_if import WorkloadEstimates, estimates_in_words

MAX_DRAINED = 1000  # nodes one what-if drains


class ModelEstimateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    gpu_model = serializers.CharField()
    cluster_id = serializers.UUIDField(allow_null=True)
    cluster = serializers.CharField(allow_null=True, help_text="the cluster's slug")
    region = serializers.CharField(allow_null=True)
    gpus = serializers.FloatField(help_text="GPUs it would hold (gpus_per_node x nodes)")
    starts_now = serializers.BooleanField(help_text="the next cycle would start it")
    start = serializers.DateTimeField(
        allow_null=True, help_text="estimated start; null: never, or beyond the forecast"
    )
    earliest = serializers.DateTimeField(allow_null=True, help_text="10th percentile")
    latest = serializers.DateTimeField(
        allow_null=True, help_text="90th percentile; null: beyond the forecast's horizon"
    )
    wait_s = serializers.FloatField(allow_null=True)
    basis = serializers.ListField(
        child=serializers.CharField(),
        help_text="what the estimate rests on: runtime_estimates, learned_runtimes,"
        " default_runtimes, reservation, head_of_line, quota, now, never, beyond_horizon",
    )
    never = serializers.CharField(
        allow_null=True, help_text="why it could never start on this model here"
    )
    price_plan = serializers.CharField()
    price_per_gpu_hour_minor = serializers.IntegerField(
        allow_null=True, help_text="minor units of currency; null: no price known"
    )
    price_per_hour_minor = serializers.IntegerField(
        allow_null=True, help_text="all its GPUs for an hour; 0 on a reservation (it pays)"
    )
    currency = serializers.CharField(allow_null=True)


class AsAskedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    cluster_id = serializers.UUIDField()
    cluster = serializers.CharField(help_text="the cluster a submission would go to (its slug)")
    gpu_models = serializers.ListField(
        child=serializers.CharField(), help_text="the models asked for; empty: any"
    )
    starts_now = serializers.BooleanField(help_text="the cycle after submitting would start it")
    start = serializers.DateTimeField(allow_null=True)
    earliest = serializers.DateTimeField(allow_null=True)
    latest = serializers.DateTimeField(allow_null=True)
    wait_s = serializers.FloatField(allow_null=True)
    basis = serializers.ListField(child=serializers.CharField())


class VolumeLocalitySerializer(serializers.Serializer):  # type: ignore[type-arg]
    node = serializers.CharField(help_text="the node where its local volume's data lives")
    starts_now = serializers.BooleanField(help_text="on that node, the next cycle")
    wait_s = serializers.FloatField(allow_null=True, help_text="on that node; null: never")
    elsewhere_starts_now = serializers.BooleanField(
        help_text="anywhere in the cluster without the volumes, the next cycle"
    )
    elsewhere_wait_s = serializers.FloatField(allow_null=True)


class WorkloadEstimateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    summary = serializers.CharField(
        help_text='e.g. "4 x a100 now, or 4 x h100 in about 40 min"', read_only=True
    )
    as_asked = AsAskedSerializer(
        help_text="the workload as asked, with all its GPU models: what submitting it gives"
    )
    estimates = ModelEstimateSerializer(
        many=True,
        source="models",
        help_text="per GPU model, as if asked for that model alone; soonest first; never last",
    )
    locality = VolumeLocalitySerializer(
        allow_null=True,
        help_text="work that mounts a local volume placed on a node: there, or elsewhere"
        " without the volume; null otherwise",
    )


def estimate_shown(answer: WorkloadEstimates) -> dict[str, Any]:
    shown = WorkloadEstimateSerializer(answer)
    return {"summary": estimates_in_words(answer), **shown.data}


class WhatIfReservationSerializer(ReservationCreateSerializer):
    """A reservation as ``POST /api/v1/reservations`` takes it, on the cluster asked about."""

    region = None  # type: ignore[assignment]  # the cluster is the path's


class ClusterWhatIfRequestSerializer(RequestSerializer):
    drain = StrictListField(
        child=StrictUUIDField(),
        required=False,
        default=list,
        max_length=MAX_DRAINED,
        help_text="nodes of the cluster to drain",
    )
    reservation = WhatIfReservationSerializer(
        required=False, allow_null=True, help_text="a reservation to add"
    )


class StartEstimateSerializer(serializers.Serializer):  # type: ignore[type-arg]
    start = serializers.SerializerMethodField()
    earliest = serializers.SerializerMethodField()
    latest = serializers.SerializerMethodField()
    basis = serializers.SerializerMethodField()

    def _at(self, seconds: float | None) -> str | None:
        if seconds is None:
            return None
        return serializers.DateTimeField().to_representation(
            datetime.fromtimestamp(seconds, tz=UTC)
        )

    def get_start(self, estimate: StartEstimate) -> str | None:
        return self._at(estimate.start)

    def get_earliest(self, estimate: StartEstimate) -> str | None:
        return self._at(estimate.earliest)

    def get_latest(self, estimate: StartEstimate) -> str | None:
        return self._at(estimate.latest)

    def get_basis(self, estimate: StartEstimate) -> list[str]:
        return [b.value for b in estimate.basis]


class EstimateChangeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    workload_id = serializers.UUIDField()
    name = serializers.CharField()
    project_id = serializers.UUIDField()
    before = StartEstimateSerializer()
    after = StartEstimateSerializer()
    delay_s = serializers.FloatField(
        allow_null=True, help_text="how much later it starts; null: no start before or after"
    )


class ClusterWhatIfSerializer(serializers.Serializer):  # type: ignore[type-arg]
    cluster_id = serializers.UUIDField()
    waiting = serializers.IntegerField(help_text="waiting workloads forecast")
    delayed = serializers.IntegerField()
    sooner = serializers.IntegerField()
    mean_delay_s = serializers.FloatField(allow_null=True, help_text="over the delayed")
    max_delay_s = serializers.FloatField(allow_null=True)
    never_after = serializers.IntegerField(help_text="could start before, never after")
    beyond_horizon_after = serializers.IntegerField(
        help_text="had a start before, none within the forecast's horizon after"
    )
    changes = EstimateChangeSerializer(
        many=True, help_text="each waiting workload whose estimate moved, most delayed first"
    )
