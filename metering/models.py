"""Metering tables, every one a projection of the log (``projections.py``).

``WorkloadTerms``, ``OpenAllocation`` and ``UsageSlice`` are the usage projection's
(asynchronous, rebuilt by ``manage.py replay``); ``Budget`` and ``BudgetAlert`` are the budget
streams' (synchronous). Tenants are plain UUID columns, not foreign keys: usage outlives
nothing, and a replay must not depend on the order tenancy rows come back in.
"""

from __future__ import annotations

from django.db import models

from tenants.models import TenantPath


class WorkloadTerms(models.Model):
    """What a workload was submitted under; its allocations are metered on these terms."""

    workload_id = models.UUIDField(primary_key=True)
    organization_id = models.UUIDField()
    project_id = models.UUIDField()
    cluster_id = models.UUIDField()
    offering = models.CharField(max_length=64, blank=True)
    price_plan = models.CharField(max_length=16)

    def __str__(self) -> str:
        return f"terms of {self.workload_id}"


class _Metered(models.Model):
    """The dimensions usage is grouped by, copied from the grant and its workload's terms."""

    allocation_id = models.UUIDField()
    workload_id = models.UUIDField()
    organization_id = models.UUIDField()
    project_id = models.UUIDField()
    cluster_id = models.UUIDField()  # the region is resolved from it when read
    offering = models.CharField(max_length=64, blank=True)
    price_plan = models.CharField(max_length=16)
    gpu_model = models.CharField(max_length=64, blank=True)
    milli_gpus = models.PositiveBigIntegerField()  # GPUs x gpu_milli over all placements
    granted_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization_id", project="project_id")

    class Meta:
        abstract = True


class OpenAllocation(_Metered):
    """An allocation granted and not released yet: metered up to "now" when read."""

    allocation_id = models.UUIDField(primary_key=True)

    class Meta:
        indexes = [models.Index(fields=["organization_id"], name="metering_open_org")]

    def __str__(self) -> str:
        return f"open {self.allocation_id}"


class UsageSlice(_Metered):
    """The part of a closed allocation's interval within one UTC day: ``[start_at, end_at)``.

    Day slices are month slices too, so a month's usage never takes part of a neighbour's.
    ``milli_gpu_seconds`` follows the rule of ``metering.intervals``.
    """

    day = models.DateField()
    start_at = models.DateTimeField()
    end_at = models.DateTimeField()
    milli_gpu_seconds = models.PositiveBigIntegerField()

    class Meta:
        indexes = [
            models.Index(fields=["organization_id", "day"], name="metering_slice_org_day"),
            models.Index(fields=["day"], name="metering_slice_day"),
        ]

    def __str__(self) -> str:
        return f"{self.allocation_id} on {self.day}"


class Budget(models.Model):
    """A monthly allowance of GPU usage for an organization (``project_id`` empty) or one of
    its projects, in milli-GPU-seconds. ``version`` is its stream's."""

    id = models.UUIDField(primary_key=True)
    organization_id = models.UUIDField()
    project_id = models.UUIDField(null=True, blank=True)
    limit_milli_gpu_seconds = models.PositiveBigIntegerField()
    hard_stop = models.BooleanField(default=False)
    version = models.PositiveIntegerField()
    updated_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization_id", project="project_id")

    class Meta:
        ordering = ["organization_id", "project_id"]

    def __str__(self) -> str:
        return f"budget {self.id}"


class BudgetAlert(models.Model):
    """A threshold of a budget reached in a UTC month (``YYYY-MM``): recorded once."""

    budget_id = models.UUIDField()
    organization_id = models.UUIDField()
    project_id = models.UUIDField(null=True, blank=True)
    month = models.CharField(max_length=7)
    threshold_percent = models.PositiveSmallIntegerField()
    used_milli_gpu_seconds = models.PositiveBigIntegerField()
    limit_milli_gpu_seconds = models.PositiveBigIntegerField()
    reached_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization_id", project="project_id")

    class Meta:
        ordering = ["reached_at", "threshold_percent"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget_id", "month", "threshold_percent"], name="metering_alert_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.month} {self.threshold_percent}%"
