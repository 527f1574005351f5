"""Execution tables. ``Assignment`` is a projection of the run and assignment streams
(``events``); ``AssignmentOutput`` and ``LogChunk`` are telemetry, written in place: a run's
output is no business state, and a replay leaves it alone.

The foreign keys do nothing on delete: a replay empties and rebuilds the tables they point
to (nodes, organizations, assignments) in one transaction with the same ids, and the
constraint, deferred to commit, still holds then; a cascade would take the rows with it.
"""

from __future__ import annotations

from django.db import models

from inventory.models import Node
from tenants.models import Organization, Project, TenantPath


class AssignmentState(models.TextChoices):
    ASSIGNED = "assigned"  # listed for its node, not reported started yet
    RUNNING = "running"
    EXITED = "exited"
    START_FAILED = "start_failed"


ENDED_STATES = frozenset({AssignmentState.EXITED, AssignmentState.START_FAILED})


class Assignment(models.Model):
    """One node's part of one run (allocation): what its agent runs, and how it went."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.DO_NOTHING)
    project = models.ForeignKey(Project, on_delete=models.DO_NOTHING)
    allocation_id = models.UUIDField(db_index=True)
    workload_id = models.UUIDField(db_index=True)
    node = models.ForeignKey(Node, on_delete=models.DO_NOTHING, related_name="assignments")
    rank = models.PositiveIntegerField()  # its placement's place in the allocation
    node_count = models.PositiveIntegerField()
    gpus = models.JSONField(default=list)  # indices on its node
    state = models.CharField(
        max_length=16, choices=AssignmentState.choices, default=AssignmentState.ASSIGNED
    )
    pid = models.PositiveIntegerField(null=True, blank=True)
    container_id = models.CharField(max_length=128, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.PositiveSmallIntegerField(null=True, blank=True)
    oom = models.BooleanField(default=False)
    message = models.CharField(max_length=2000, blank=True)
    cgroups_note = models.CharField(max_length=300, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(default=0)  # the last report applied
    created_at = models.DateTimeField()
    version = models.PositiveIntegerField(default=0)  # of its own stream (its reports)

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["allocation_id", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["allocation_id", "rank"], name="one_rank_per_run"),
        ]
        indexes = [models.Index(fields=["node", "state"], name="assignment_node_state")]

    def __str__(self) -> str:
        return f"{self.allocation_id}#{self.rank}"


class AssignmentOutput(models.Model):
    """Where an assignment's output stands: the contiguous high-water mark of what arrived
    (``next_offset``), what was stored, what the workload's cap kept out, and what the agent
    itself could not buffer. Made with the assignment; not rebuilt by a replay."""

    assignment = models.OneToOneField(
        Assignment, on_delete=models.DO_NOTHING, primary_key=True, related_name="output"
    )
    workload_id = models.UUIDField(db_index=True)  # the cap is per workload
    next_offset = models.PositiveBigIntegerField(default=0)
    stored_bytes = models.PositiveBigIntegerField(default=0)
    truncated_bytes = models.PositiveBigIntegerField(default=0)
    dropped_bytes = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"output of {self.assignment_id} at {self.next_offset}"


class LogChunk(models.Model):
    """Bytes of an assignment's output (stdout and stderr, one stream) from ``offset``."""

    id = models.BigAutoField(primary_key=True)
    assignment = models.ForeignKey(
        Assignment, on_delete=models.DO_NOTHING, related_name="log_chunks"
    )
    offset = models.PositiveBigIntegerField()
    data = models.BinaryField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["assignment", "offset"], name="one_chunk_per_offset"),
        ]

    def __str__(self) -> str:
        return f"{self.assignment_id}@{self.offset}"
