"""The provisioning driver interface: the steps that turn a registered machine into a node
that can run GPU work, and their teardown.

Every step is called with an idempotency key (node, run, step): a driver must make a second
call with the same key return the first call's result without a second effect, the way cloud
APIs take client tokens. Workers die mid-step; the step then runs again.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import UUID

# The attempt being performed, for drivers that care (the simulator draws its faults by
# attempt). Set by the provisioning runner around each driver call.
step_attempt: ContextVar[int] = ContextVar("step_attempt")

StepDetails = dict[str, Any]

PROVISION_STEPS = (
    "allocate_server",
    "install_gpu_drivers",
    "verify_gpus",
    "connect_network",
    "attach_storage",
    "create_credentials",
)
TEARDOWN_STEPS = (
    "revoke_credentials",
    "detach_storage",
    "disconnect_network",
    "release_server",
)


class StepFailed(Exception):
    """A step did not succeed. ``retryable`` failures are tried again with backoff."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class NodeSpec:
    """What a driver needs to know of the node."""

    node_id: UUID
    name: str
    cluster: str
    gpu_model: str | None
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    driver: str = ""  # the node's own driver ("": the deployment's)


@dataclass(frozen=True)
class WorkloadRun:
    """One run of a workload on the GPUs of its allocation."""

    allocation_id: UUID
    workload_id: UUID
    kind: str
    node_ids: tuple[UUID, ...]
    gpu_milli: int
    runtime_s: float | None  # how long the work takes, where known (None: until stopped)
    driver: str = ""  # its nodes' driver ("": the deployment's)


class RunOutcome(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class RunState:
    outcome: RunOutcome
    message: str = ""


class ProvisioningDriver(ABC):
    """One method per step; each returns details worth recording (ids, addresses)."""

    name: ClassVar[str]
    # Whether its runs execute the workload's program: then a workload without an image
    # needs a command (the simulated driver runs nothing, so it needs neither).
    runs_programs: ClassVar[bool] = False

    def run_step(self, step: str, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        if step not in PROVISION_STEPS + TEARDOWN_STEPS:
            raise ValueError(f"unknown provisioning step {step!r}")
        method = getattr(self, step)
        details: StepDetails = method(node, idempotency_key=idempotency_key)
        return details

    @abstractmethod
    def allocate_server(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def install_gpu_drivers(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def verify_gpus(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def connect_network(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def attach_storage(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def create_credentials(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def revoke_credentials(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def detach_storage(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def disconnect_network(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def release_server(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails: ...

    # Workloads: start a run on its allocation's nodes, ask how it goes, stop it.

    @abstractmethod
    def workload_start(self, run: WorkloadRun, *, idempotency_key: str) -> StepDetails: ...

    @abstractmethod
    def workload_poll(self, run: WorkloadRun, *, started_at: float, now: float) -> RunState: ...

    @abstractmethod
    def workload_stop(self, run: WorkloadRun, *, idempotency_key: str) -> StepDetails: ...
