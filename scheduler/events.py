"""Scheduling events.

Streams:
- ``workload/<id>``: a workload's whole life as its owner and its runs see it (submitted,
  cancel asked, provisioning, running, released with the status it leaves behind).
- ``schedule/<cluster id>``: the scheduler's decisions for one cluster (admissions, grants,
  preemptions). Every cycle appends with the version it read, so two schedulers can never
  grant the same GPU: the second append conflicts and its cycle is redone.
- ``queue/<project id>``, ``priority_class/<name>``, ``reservation/<id>``: policy.

An allocation is granted in the schedule stream and released in the workload stream (a run
ended, the workload was cancelled, its node failed) or in the schedule stream (preempted).
Releases never need the scheduler's version: freeing a GPU cannot double-book one, and a
scheduler that has not read a release yet only sees less free capacity than there is.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from events.types import DomainEvent, event_type

WORKLOAD_STREAM = "workload"
SCHEDULE_STREAM = "schedule"
QUEUE_STREAM = "queue"
PRIORITY_CLASS_STREAM = "priority_class"
RESERVATION_STREAM = "reservation"


class VolumeMountData(BaseModel):
    """A volume a workload mounts, at ``path`` in its runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    volume: UUID
    path: str
    read_only: bool = False


class PlacementData(BaseModel):
    """One node's part of an allocation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: UUID
    node: str
    gpus: list[int]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int


@event_type("scheduler.PriorityClassDefined")
class PriorityClassDefined(DomainEvent):
    name: str
    value: int
    preemptible: bool  # work of this class may be preempted unless it says otherwise
    description: str


@event_type("scheduler.QueueConfigured")
class QueueConfigured(DomainEvent):
    project_id: UUID
    organization_id: UUID
    cohort: str
    borrowing_limit: int | None
    lending_limit: int | None
    weight: float


@event_type("scheduler.WorkloadSubmitted")
class WorkloadSubmitted(DomainEvent):
    workload_id: UUID
    organization_id: UUID
    project_id: UUID
    cluster_id: UUID
    name: str
    kind: str
    gpu_models: list[str]
    gpus_per_node: int
    nodes: int
    min_nodes: int | None
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    priority_class: str
    priority: int
    preemptible: bool
    topology: str
    runtime_estimate_s: float | None
    max_runtime_s: float | None
    retry_limit: int
    restart_policy: str
    reservation_id: UUID | None
    price_plan: str
    offering: str | None
    order_id: UUID | None
    # What it runs; events recorded before workloads carried a program have none of these.
    # ``secrets`` are names only: a value never enters the log.
    command: list[str] = []
    image: str | None = None
    env: dict[str, str] = {}
    secrets: list[str] = []
    working_dir: str | None = None
    ports: list[int] = []
    volumes: list[VolumeMountData] = []  # the project's volumes its runs mount
    http_ports: list[int] = []  # of ``ports``: served by the web gateway
    ssh: bool = False  # issue 32: an sshd beside the run (older events: none)
    idle_stop_s: float | None = None  # issue 32: a dev environment's idle stop
    # A task of a job array (``workload_submit_array``): the array's id, the task's index
    # (0 .. count - 1) and the array's size; none for a workload submitted alone.
    array_id: UUID | None = None
    array_index: int | None = None
    array_count: int | None = None


@event_type("scheduler.WorkloadCancelRequested")
class WorkloadCancelRequested(DomainEvent):
    cluster_id: UUID
    reason: str


@event_type("scheduler.WorkloadAdmitted")
class WorkloadAdmitted(DomainEvent):
    """The cluster's scheduler took the workload into its queue."""

    workload_id: UUID


@event_type("scheduler.AllocationGranted")
class AllocationGranted(DomainEvent):
    allocation_id: UUID
    workload_id: UUID
    organization_id: UUID
    project_id: UUID
    gpu_model: str | None
    placements: list[PlacementData]
    granted_at: datetime


@event_type("scheduler.WorkloadPreempted")
class WorkloadPreempted(DomainEvent):
    """Releases the victim's allocation; the victim goes back to pending. ``code`` is the
    engine's ``PreemptionCode`` (priority, reclaim, reservation, quota), ``reason`` its
    sentence; events recorded before codes were carried have none."""

    workload_id: UUID
    allocation_id: UUID
    by_workload_id: UUID
    reason: str
    code: str | None = None


@event_type("scheduler.WorkloadProvisioning")
class WorkloadProvisioning(DomainEvent):
    allocation_id: UUID
    placements: list[PlacementData]


@event_type("scheduler.WorkloadRunning")
class WorkloadRunning(DomainEvent):
    allocation_id: UUID
    started_at: datetime
    details: dict[str, str]


class EndpointData(BaseModel):
    """Where one port of a run is reached, as the node agent running it reported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int
    address: str
    node: str
    kind: str = "port"  # "ssh": the run's sshd (issue 32)


@event_type("scheduler.WorkloadEndpointsReported")
class WorkloadEndpointsReported(DomainEvent):
    """The run of ``allocation_id`` is reached at ``endpoints`` (all of them, every node's);
    its end clears them."""

    allocation_id: UUID
    endpoints: list[EndpointData]


@event_type("scheduler.AllocationReleased")
class AllocationReleased(DomainEvent):
    """An allocation ended. ``status`` is what the workload becomes: ``pending`` when it is
    requeued (retried, restarted, its node failed), else final. ``ended_at``, when set, is
    when the run stopped being of use, before the release: a failed node's last heartbeat
    (its failure is only detected later). Usage is metered to it."""

    allocation_id: UUID
    cluster_id: UUID
    reason: str  # succeeded, failed, cancelled, node_failure, max_runtime, lost
    message: str
    status: str
    released_at: datetime
    ended_at: datetime | None = None


@event_type("scheduler.WorkloadCancelled")
class WorkloadCancelled(DomainEvent):
    """A workload cancelled while it held no GPUs."""

    cluster_id: UUID
    reason: str


@event_type("scheduler.ReservationCreated")
class ReservationCreated(DomainEvent):
    reservation_id: UUID
    organization_id: UUID
    project_id: UUID
    cluster_id: UUID
    gpu_model: str
    gpus: int
    starts_at: datetime
    ends_at: datetime
    offering: str | None
    order_id: UUID | None


@event_type("scheduler.ReservationCancelled")
class ReservationCancelled(DomainEvent):
    """``charged``: the window stays billed (cancelled inside the notice period before its
    start, or after it); None in events from before the notice period, when a cancellation
    was charged exactly when it came after the start."""

    reason: str
    charged: bool | None = None


# --- Preemption with notice (issue 32) ---
@event_type("scheduler.RunNoticeGiven")
class RunNoticeGiven(DomainEvent):
    """The run of ``allocation_id`` was told it will be stopped at ``deadline`` (SIGTERM and
    ``.neocloud/notice.json`` from its agent): ``reason`` is ``preempted`` or
    ``max_runtime``; ``notice_s`` the operator's ``PREEMPTION_NOTICE_S`` it was given."""

    allocation_id: UUID
    reason: str
    deadline: datetime
    notice_s: float
