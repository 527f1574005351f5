"""Fleet tables: projections of the fleet's event streams (``projections.py``)."""

from __future__ import annotations

from django.db import models

from inventory.lifecycle import SCHEDULABLE, NodeState


class Interconnect(models.TextChoices):
    NVSWITCH = "nvswitch", "NVSwitch"
    NVLINK = "nvlink", "NVLink"
    PCIE = "pcie", "PCIe"


class GpuModel(models.Model):
    slug = models.SlugField(max_length=64, primary_key=True)
    name = models.CharField(max_length=100)
    vendor = models.CharField(max_length=50)
    memory_gib = models.PositiveIntegerField()
    interconnect = models.CharField(max_length=16, choices=Interconnect.choices)
    shareable = models.BooleanField(help_text="Can be sold in fractions (milli-GPU).")
    mig_profiles = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Region(models.Model):
    slug = models.SlugField(max_length=64, primary_key=True)
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Cluster(models.Model):
    id = models.UUIDField(primary_key=True)
    region = models.ForeignKey(Region, on_delete=models.PROTECT)
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Rack(models.Model):
    """A rack and its leaf switch: the unit a multi-node placement tries not to cross."""

    id = models.UUIDField(primary_key=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="racks")
    name = models.CharField(max_length=64)
    leaf_switch = models.CharField(max_length=64)
    spine = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="rack_name_per_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class Node(models.Model):
    id = models.UUIDField(primary_key=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    rack = models.ForeignKey(
        Rack, on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes"
    )
    name = models.CharField(max_length=128)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, null=True, blank=True)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    state = models.CharField(max_length=16, choices=[(s.value, s.value) for s in NodeState])
    state_reason = models.CharField(max_length=300, blank=True)
    state_changed_at = models.DateTimeField()
    provisioning_run = models.PositiveIntegerField(default=0)
    token_hash = models.CharField(max_length=64)
    # Which provisioning driver brings its runs up ("": the deployment's PROVISIONING_DRIVER).
    driver = models.CharField(max_length=32, blank=True)
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    # Telemetry, not business state: written in place by heartbeats, not an event.
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # What the node agent last said of itself (version, runtime, fake GPUs, cgroups), and
    # the address its peers reach it at (a gang's rendezvous, MASTER_ADDR).
    agent_info = models.JSONField(default=dict, blank=True)
    agent_address = models.CharField(max_length=255, blank=True)
    # What the agent's last full report found different from the fleet ("" when nothing).
    inventory_mismatch = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_name_per_cluster"),
        ]
        indexes = [models.Index(fields=["state"], name="node_state_idx")]

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.state in SCHEDULABLE


class Gpu(models.Model):
    id = models.UUIDField(primary_key=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    nvlink_domain = models.PositiveSmallIntegerField(
        default=0, help_text="GPUs of one domain talk over NVLink/NVSwitch, not PCIe."
    )
    healthy = models.BooleanField(default=True)
    fault = models.CharField(max_length=300, blank=True)
    # Telemetry of the last heartbeat that reported it, written in place. ``idle_since``: when
    # its utilisation was first seen below ``GPU_IDLE_THRESHOLD_PCT`` (None while busy).
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mib = models.PositiveBigIntegerField(null=True, blank=True)
    telemetry_at = models.DateTimeField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_index_per_node"),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}#{self.index}"


class ProvisioningStep(models.Model):
    """Progress of one step of one provisioning (or teardown) run of a node."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="steps")
    run = models.PositiveIntegerField()
    phase = models.CharField(max_length=16)  # provision | teardown
    step = models.CharField(max_length=32)
    status = models.CharField(max_length=16)  # running | retrying | succeeded | failed
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["node", "run", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "run", "phase", "step"], name="one_row_per_run_step"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node}: {self.phase}/{self.step} {self.status}"


class SimulatedEffect(models.Model):
    """What the simulated driver has done, one row per idempotency key: a second call with
    the same key finds the row and returns its result, as a real cloud API would."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    node_id = models.UUIDField(db_index=True)
    step = models.CharField(max_length=32)
    result = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.idempotency_key
