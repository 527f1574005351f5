"""API shapes of usage reports and budgets."""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from metering import selectors
from metering.intervals import gpu_hours
from metering.models import Budget
from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import (
    StrictBooleanField,
    StrictDecimalField,
    StrictPrimaryKeyRelatedField,
)
from tenants.models import Organization, Project

# A billion GPU-hours: far beyond any fleet's month, and its milli-GPU-seconds fit a bigint.
MAX_BUDGET_GPU_HOURS = 1_000_000_000

# Declared with inline_serializer: "from" is a Python keyword.
UsageRowSerializer = inline_serializer(
    "UsageRow",
    many=True,
    fields={
        **{
            name: serializers.CharField(
                required=False, allow_null=True, help_text="Present when grouped by it."
            )
            for name in selectors.DIMENSIONS
        },
        "gpu_seconds": serializers.CharField(help_text="Decimal string, exact to the milli."),
        "milli_gpu_seconds": serializers.IntegerField(),
    },
)
UsageReportSerializer = inline_serializer(
    "UsageReport",
    fields={
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "group_by": serializers.ListField(child=serializers.CharField()),
        "results": UsageRowSerializer,
    },
)
UsageDailySerializer = inline_serializer(
    "UsageDaily",
    fields={
        "from": serializers.DateTimeField(),
        "to": serializers.DateTimeField(),
        "days": inline_serializer(
            "UsageDay",
            many=True,
            fields={
                "day": serializers.DateField(),
                "gpu_seconds": serializers.CharField(),
                "milli_gpu_seconds": serializers.IntegerField(),
            },
        ),
    },
)


class BudgetSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    organization = serializers.UUIDField(source="organization_id")
    project = serializers.UUIDField(source="project_id", allow_null=True)
    gpu_hours = serializers.SerializerMethodField()
    month_used_milli_gpu_seconds = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "organization",
            "project",
            "gpu_hours",
            "limit_milli_gpu_seconds",
            "hard_stop",
            "month_used_milli_gpu_seconds",
            "updated_at",
        ]

    @extend_schema_field(serializers.CharField(help_text="Decimal string"))
    def get_gpu_hours(self, budget: Budget) -> str:
        return gpu_hours(budget.limit_milli_gpu_seconds)

    @extend_schema_field(serializers.IntegerField(help_text="This UTC month so far"))
    def get_month_used_milli_gpu_seconds(self, budget: Budget) -> int:
        """From ``context["month_usage"]``: the page's usage, read for all its budgets at once."""
        used: dict[UUID, int] = self.context["month_usage"]
        return used[budget.id]


class BudgetSetSerializer(RequestSerializer):
    organization = StrictPrimaryKeyRelatedField(queryset=Organization.objects.all())
    project = StrictPrimaryKeyRelatedField(
        queryset=Project.objects.all(), required=False, allow_null=True
    )
    gpu_hours = StrictDecimalField(
        max_digits=15,
        decimal_places=3,
        min_value=Decimal("0.001"),
        max_value=Decimal(MAX_BUDGET_GPU_HOURS),
    )
    hard_stop = StrictBooleanField(default=False)
