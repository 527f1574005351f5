"""Order tables: projections of the order streams (``projections.py``)."""

from __future__ import annotations

from django.db import models

from tenants.models import Organization, Project, TenantPath


class OrderStatus(models.TextChoices):
    SUBMITTED = "submitted"
    VALIDATED = "validated"  # large orders wait here for an operator
    APPROVED = "approved"
    FULFILLED = "fulfilled"  # its workload or reservation exists
    CLOSED = "closed"  # its workload or reservation ended
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class Order(models.Model):
    """What a customer ordered from the catalog, the price then, and where it stands.

    ``version`` is the order stream's version, for optimistic concurrency."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    offering = models.SlugField(max_length=64)
    kind = models.CharField(max_length=16)
    region = models.SlugField(max_length=64)
    price_plan = models.CharField(max_length=16)
    gpu_model = models.SlugField(max_length=64, blank=True, help_text="As asked; blank: any.")
    gpu_models = models.JSONField(help_text="Acceptable GPU models, preferred first.")
    quantity = models.PositiveIntegerField()
    gpus_per_node = models.PositiveIntegerField()
    nodes = models.PositiveIntegerField()
    gpu_milli = models.PositiveIntegerField()
    gpus = models.PositiveIntegerField(help_text="GPUs it holds at most (a share counts as one).")
    runtime_estimate_s = models.PositiveIntegerField(null=True, blank=True)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    price_per_gpu_hour_minor = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    estimated_cost_minor = models.PositiveBigIntegerField(null=True, blank=True)
    name = models.CharField(max_length=128, blank=True)
    # What its workload runs (as ``scheduler.models.Workload``); blank: none.
    command = models.JSONField(default=list)  # argv
    image = models.CharField(max_length=512, blank=True)
    env = models.JSONField(default=dict)
    secrets = models.JSONField(default=list)  # names of project secrets, never values
    working_dir = models.CharField(max_length=1024, blank=True)
    ports = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=OrderStatus.choices)
    status_reason = models.CharField(max_length=500, blank=True)
    needs_approval = models.BooleanField(default=False)
    workload_id = models.UUIDField(null=True, blank=True)
    reservation_id = models.UUIDField(null=True, blank=True)
    submitted_by = models.CharField(max_length=200)
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["organization", "created_at"], name="order_org_created"),
            models.Index(fields=["status"], name="order_status"),
            models.Index(fields=["workload_id"], name="order_workload"),
        ]

    def __str__(self) -> str:
        return f"{self.offering} x{self.quantity} ({self.status})"


class OrderStep(models.Model):
    """One step of an order's life: the status it entered, who moved it there and why."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="steps")
    position = models.BigIntegerField(help_text="The event's position in the log.")
    status = models.CharField(max_length=16, choices=OrderStatus.choices)
    actor = models.CharField(max_length=200)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["order", "position"]
        constraints = [
            models.UniqueConstraint(fields=["position"], name="order_step_per_event"),
        ]

    def __str__(self) -> str:
        return f"{self.order_id}: {self.status}"


class ApprovalPolicy(models.Model):
    """Operators' setting (one row): orders of more GPUs than this wait for their approval."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    threshold_gpus = models.PositiveIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "approval policy"

    def __str__(self) -> str:
        return f"approval above {self.threshold_gpus} GPUs"
