"""Catalog tables: projections of the offering streams (``projections.py``)."""

from __future__ import annotations

from django.db import models

from scheduler.specs import PricePlan as Plan


class OfferingKind(models.TextChoices):
    INSTANCE = "instance"  # a slice of one node (1xH100 … 8xH100), runs until stopped
    TRAINING = "training"  # a job: gpus_per_node x nodes, optionally a gang, capped runtime
    INFERENCE = "inference"  # a service of replicas, whole GPUs or a share of one
    RESERVED = "reserved"  # GPUs of one model held for a time window
    DEV = "dev"  # a dev environment on one node: SSH, until stopped or idle (issue 32)


class Offering(models.Model):
    """What a customer can order. Shape fields hold per kind (see ``services.offering_define``).

    ``version`` is the offering stream's version: price plans live in the same stream."""

    slug = models.SlugField(max_length=64, primary_key=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=OfferingKind.choices)
    gpu_models = models.JSONField(help_text="Acceptable GPU model slugs, preferred first.")
    gpus_per_node = models.PositiveIntegerField(default=1)
    max_nodes = models.PositiveIntegerField(
        default=1, help_text="Training: nodes; inference: replicas; else 1."
    )
    gang = models.BooleanField(default=True, help_text="Training: all nodes start together.")
    gpu_milli = models.PositiveIntegerField(
        default=1000, help_text="Inference: milli-GPU per replica (< 1000 on shareable models)."
    )
    topology = models.CharField(max_length=32, default="any")
    max_runtime_s = models.PositiveIntegerField(null=True, blank=True)
    max_gpus = models.PositiveIntegerField(
        null=True, blank=True, help_text="Reserved capacity: most GPUs one order may hold."
    )
    max_duration_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="Reserved capacity: longest window."
    )
    # Defaults of what a workload against it runs (as ``scheduler.models.Workload``); blank:
    # none. Never secrets: those are the project's.
    image = models.CharField(max_length=512, blank=True)
    command = models.JSONField(default=list, blank=True)  # argv
    env = models.JSONField(default=dict, blank=True)
    working_dir = models.CharField(max_length=1024, blank=True)
    ports = models.JSONField(default=list, blank=True)
    active = models.BooleanField(default=True)
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class OfferingGpuModel(models.Model):
    """One acceptable GPU model of an offering (``Offering.gpu_models`` as rows, to filter by)."""

    offering = models.ForeignKey(Offering, on_delete=models.CASCADE, related_name="+")
    gpu_model = models.SlugField(max_length=64)
    preference = models.PositiveSmallIntegerField()  # 0: preferred

    class Meta:
        ordering = ["offering", "preference"]
        constraints = [
            models.UniqueConstraint(fields=["offering", "gpu_model"], name="offering_gpu_model"),
        ]

    def __str__(self) -> str:
        return f"{self.offering_id}: {self.gpu_model}"


class PricePlan(models.Model):
    """The price of an offering in one region under one plan, per GPU-hour, in minor units
    of its currency (never a float)."""

    id = models.UUIDField(primary_key=True)  # derived from (offering, region, plan)
    offering = models.ForeignKey(Offering, on_delete=models.CASCADE, related_name="price_plans")
    region = models.SlugField(max_length=64)
    plan = models.CharField(max_length=16, choices=[(p.value, p.value) for p in Plan])
    price_per_gpu_hour_minor = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3, help_text="ISO 4217, e.g. USD.")
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["offering", "region", "plan"]
        constraints = [
            models.UniqueConstraint(
                fields=["offering", "region", "plan"], name="one_price_per_offering_region_plan"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.offering_id} {self.region} {self.plan}"


class StoragePrice(models.Model):
    """What a GB-hour of provisioned volume of ``volume_type`` costs, in minor units of its
    currency (issue 32: volumes are billed for their size, used or not)."""

    volume_type = models.CharField(max_length=8, primary_key=True)
    price_per_gb_hour_minor = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3, help_text="ISO 4217, e.g. USD.")
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.volume_type}: {self.price_per_gb_hour_minor} {self.currency}/GB-h"
