"""Fleet events. Streams: ``gpu_model/<slug>``, ``region/<slug>``, ``cluster/<id>`` (the
cluster and its racks) and ``node/<id>`` (a node, its GPUs, its lifecycle and provisioning)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from events.types import DomainEvent, event_type

GPU_MODEL_STREAM = "gpu_model"
REGION_STREAM = "region"
CLUSTER_STREAM = "cluster"
NODE_STREAM = "node"


@event_type("inventory.GpuModelDefined")
class GpuModelDefined(DomainEvent):
    slug: str
    name: str
    vendor: str
    memory_gib: int
    interconnect: str
    shareable: bool
    mig_profiles: list[str]


@event_type("inventory.RegionDefined")
class RegionDefined(DomainEvent):
    slug: str
    name: str


@event_type("inventory.ClusterDefined")
class ClusterDefined(DomainEvent):
    cluster_id: UUID
    region: str
    slug: str
    name: str


@event_type("inventory.RackDefined")
class RackDefined(DomainEvent):
    rack_id: UUID
    name: str
    leaf_switch: str
    spine: str


class GpuSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_id: UUID
    index: int
    uuid: str
    nvlink_domain: int


@event_type("inventory.NodeRegistered")
class NodeRegistered(DomainEvent):
    node_id: UUID
    cluster_id: UUID
    rack_id: UUID | None
    name: str
    gpu_model: str | None
    cpu_milli: int
    memory_mib: int
    gpus: list[GpuSpec]
    token_hash: str
    driver: str = ""  # "": the deployment's PROVISIONING_DRIVER


@event_type("inventory.NodeRespecified")
class NodeRespecified(DomainEvent):
    """An import changed the node's description (rack, capacity, driver)."""

    rack_id: UUID | None
    cpu_milli: int
    memory_mib: int
    driver: str = ""


@event_type("inventory.NodeTokenRotated")
class NodeTokenRotated(DomainEvent):
    token_hash: str


@event_type("inventory.NodeStateChanged")
class NodeStateChanged(DomainEvent):
    """One transition of the lifecycle table (``inventory.lifecycle``)."""

    action: str
    from_state: str
    to_state: str
    reason: str


@event_type("inventory.ProvisioningStarted")
class ProvisioningStarted(DomainEvent):
    run: int
    phase: str  # provision | teardown
    steps: list[str]


@event_type("inventory.ProvisioningStepStarted")
class ProvisioningStepStarted(DomainEvent):
    run: int
    phase: str
    step: str
    attempt: int


@event_type("inventory.ProvisioningStepSucceeded")
class ProvisioningStepSucceeded(DomainEvent):
    run: int
    phase: str
    step: str
    attempt: int
    details: dict[str, Any]


@event_type("inventory.ProvisioningStepFailed")
class ProvisioningStepFailed(DomainEvent):
    run: int
    phase: str
    step: str
    attempt: int
    error: str
    final: bool  # no retry left: the run failed


@event_type("inventory.GpuFailed")
class GpuFailed(DomainEvent):
    index: int
    reason: str


@event_type("inventory.GpuRecovered")
class GpuRecovered(DomainEvent):
    index: int
