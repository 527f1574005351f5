"""Scheduling tables. Every one but ``SchedulerLease`` and ``WorkloadWait`` is a projection of
the scheduling streams (see ``events``); those two are the service's working state: who
schedules a cluster now, and why each waiting workload waits as of the last cycle."""

from __future__ import annotations

from django.db import models

from tenants.models import Organization, Project, TenantPath


class WorkloadStatus(models.TextChoices):
    PENDING = "pending"
    ADMITTED = "admitted"
    SCHEDULED = "scheduled"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATUSES = frozenset(
    {WorkloadStatus.SUCCEEDED, WorkloadStatus.FAILED, WorkloadStatus.CANCELLED}
)
WAITING_STATUSES = frozenset({WorkloadStatus.PENDING, WorkloadStatus.ADMITTED})
HOLDING_STATUSES = frozenset(
    {WorkloadStatus.SCHEDULED, WorkloadStatus.PROVISIONING, WorkloadStatus.RUNNING}
)


class PriorityClass(models.Model):
    name = models.SlugField(max_length=64, primary_key=True)
    value = models.IntegerField()
    preemptible = models.BooleanField(default=False)
    description = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class Queue(models.Model):
    """A project's queue: its cohort and borrowing terms. Its nominal quota per GPU model is
    the project's quota (``tenants``)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    cohort = models.SlugField(max_length=64, blank=True)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    weight = models.FloatField(default=1.0)
    version = models.PositiveIntegerField(default=0)

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["organization", "project"]

    def __str__(self) -> str:
        return f"queue of {self.project_id}"


class Workload(models.Model):
    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    cluster_id = models.UUIDField(db_index=True)
    name = models.CharField(max_length=128)
    kind = models.CharField(max_length=16)
    gpu_models = models.JSONField(default=list)
    gpus_per_node = models.PositiveIntegerField()
    nodes = models.PositiveIntegerField()
    min_nodes = models.PositiveIntegerField(null=True, blank=True)
    gpu_milli = models.PositiveIntegerField()
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    priority_class = models.CharField(max_length=64)
    priority = models.IntegerField()
    preemptible = models.BooleanField()
    topology = models.CharField(max_length=32)
    runtime_estimate_s = models.FloatField(null=True, blank=True)
    max_runtime_s = models.FloatField(null=True, blank=True)
    retry_limit = models.PositiveIntegerField()
    restart_policy = models.CharField(max_length=16)
    reservation_id = models.UUIDField(null=True, blank=True)
    price_plan = models.CharField(max_length=16)
    offering = models.CharField(max_length=64, blank=True)
    order_id = models.UUIDField(null=True, blank=True)
    command = models.JSONField(default=list)  # argv
    image = models.CharField(max_length=512, blank=True)
    env = models.JSONField(default=dict)
    secrets = models.JSONField(default=list)  # names of project secrets, never values
    working_dir = models.CharField(max_length=1024, blank=True)
    ports = models.JSONField(default=list)
    volumes = models.JSONField(default=list)  # [{volume, path, read_only}]
    http_ports = models.JSONField(default=list)  # of ``ports``: served by the web gateway
    ssh = models.BooleanField(default=False)  # an sshd beside each run (issue 32)
    idle_stop_s = models.FloatField(null=True, blank=True)  # a dev environment's (issue 32)
    # Where each port is reached, as the node agent will report it; none reports yet.
    endpoints = models.JSONField(default=list)
    # A task of a job array: the array, the task's index in it and the array's size.
    array_id = models.UUIDField(null=True, blank=True, db_index=True)
    array_index = models.PositiveIntegerField(null=True, blank=True)
    array_count = models.PositiveIntegerField(null=True, blank=True)

    status = models.CharField(max_length=16, choices=WorkloadStatus.choices)
    status_reason = models.CharField(max_length=300, blank=True)
    allocation_id = models.UUIDField(null=True, blank=True)  # the one it holds now
    runs = models.PositiveIntegerField(default=0)  # allocations granted so far
    failures = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)  # of the current run
    finished_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField()

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["-submitted_at", "id"]
        indexes = [
            models.Index(fields=["cluster_id", "status"], name="workload_cluster_status"),
            # The recent submissions forecasts expect to repeat (``selectors.forecasts``).
            models.Index(fields=["cluster_id", "submitted_at"], name="workload_cluster_submitted"),
        ]

    def __str__(self) -> str:
        return self.name


class Allocation(models.Model):
    """GPUs granted to one run of a workload, from grant to release."""

    id = models.UUIDField(primary_key=True)
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="allocations")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    cluster_id = models.UUIDField()
    gpu_model = models.CharField(max_length=64, blank=True)
    placements = models.JSONField()
    gpu_milli = models.PositiveIntegerField()  # all of it, in milli-GPU
    granted_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    release_reason = models.CharField(max_length=32, blank=True)

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["-granted_at", "id"]
        indexes = [
            models.Index(
                fields=["cluster_id"],
                condition=models.Q(released_at__isnull=True),
                name="allocation_live",
            )
        ]

    def __str__(self) -> str:
        return str(self.id)


class ReservationStatus(models.TextChoices):
    ACTIVE = "active"
    CANCELLED = "cancelled"


class Reservation(models.Model):
    """``gpus`` of ``gpu_model`` held for a project's queue from ``starts_at`` to ``ends_at``."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    cluster_id = models.UUIDField()
    gpu_model = models.CharField(max_length=64)
    gpus = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=ReservationStatus.choices)
    offering = models.CharField(max_length=64, blank=True)
    order_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField()
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # Cancelled and still billed for its window (``ReservationCancelled.charged``).
    cancellation_charged = models.BooleanField(null=True, blank=True)
    version = models.PositiveIntegerField()

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["starts_at", "id"]

    def __str__(self) -> str:
        return f"{self.gpus}x{self.gpu_model} {self.starts_at:%Y-%m-%d %H:%M}"


class SchedulerLease(models.Model):
    """Who schedules a cluster: at most one holder until ``expires_at``."""

    cluster_id = models.UUIDField(primary_key=True)
    holder = models.CharField(max_length=200)
    term = models.PositiveBigIntegerField(default=0)  # grows with every change of holder
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.holder} (term {self.term})"


class WorkloadWait(models.Model):
    """Why a workload waits, and its place in line, as of the last cycle."""

    workload_id = models.UUIDField(primary_key=True)
    cluster_id = models.UUIDField(db_index=True)
    code = models.CharField(max_length=32)
    message = models.CharField(max_length=500)
    figures = models.JSONField(default=dict)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.code}"


class WorkloadEstimate(models.Model):
    """When a waiting workload is expected to start, as the last forecast of its cluster said
    (``services.estimates``). Derived data, not events: rebuilt by the estimates task from the
    cluster's state, never replayed; a row goes once its workload started (its errors are
    then observed) or stopped waiting.

    ``first_*`` is the first estimate of this wait (made within one estimate interval of the
    submission, or of a preemption that put it back in line), kept for the error metric."""

    workload_id = models.UUIDField(primary_key=True)
    cluster_id = models.UUIDField(db_index=True)
    estimated_start = models.DateTimeField(null=True)  # None: never, or beyond the horizon
    earliest = models.DateTimeField(null=True)
    latest = models.DateTimeField(null=True)
    basis = models.JSONField(default=list)  # ``engine.forecast.Basis`` codes
    computed_at = models.DateTimeField()
    first_estimated_start = models.DateTimeField(null=True)
    first_computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.estimated_start}"


class FragmentationSample(models.Model):
    """Telemetry, not an event: what one shape could do on one GPU model of a cluster at
    ``at`` (the start of a sampling interval), for the operators' chart. Nothing replays it;
    samples past the retention are deleted."""

    cluster_id = models.UUIDField()
    gpu_model = models.CharField(max_length=64)
    shape = models.CharField(max_length=16)  # "4": 4 GPUs on one node; "2x8": a gang
    startable = models.PositiveIntegerField()  # whole copies that could start now
    would_hold = models.PositiveIntegerField()  # copies the free GPUs would hold together
    free = models.PositiveIntegerField()  # whole free GPUs on schedulable nodes
    at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            # One sample set per interval: a second tick in it writes nothing.
            models.UniqueConstraint(
                fields=["cluster_id", "gpu_model", "shape", "at"], name="fragmentation_sample_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.gpu_model} {self.shape} at {self.at}"
