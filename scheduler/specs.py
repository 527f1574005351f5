"""What a customer asks to run: the request fields of the engine plus the lifecycle policy.

Orders and the workloads API both build one; ``services.workload_submit`` validates it.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass


class WorkloadKind(enum.StrEnum):
    JOB = "job"  # runs to completion; retried by ``retry_limit``
    SERVICE = "service"  # runs until cancelled; restarted by ``restart_policy``


class RestartPolicy(enum.StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"
    ALWAYS = "always"


class PricePlan(enum.StrEnum):
    ON_DEMAND = "on_demand"
    PREEMPTIBLE = "preemptible"
    RESERVED = "reserved"


@dataclass(frozen=True)
class WorkloadSpec:
    """GPU counts are per node; ``gpu_milli`` < 1000 asks for a share of one GPU."""

    name: str
    gpu_models: tuple[str, ...]  # acceptable models, preferred first; () = any
    kind: WorkloadKind = WorkloadKind.JOB
    gpus_per_node: int = 1
    nodes: int = 1
    min_nodes: int | None = None  # gang minimum; None = all nodes
    gpu_milli: int = 1000
    cpu_milli: int = 0
    memory_mib: int = 0
    priority_class: str = "standard"
    preemptible: bool = False
    topology: str = "any"
    runtime_estimate_s: float | None = None
    max_runtime_s: float | None = None
    retry_limit: int = 0
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    region: str | None = None
    cluster: uuid.UUID | None = None
    reservation: uuid.UUID | None = None
    price_plan: PricePlan | None = None  # None: follows from the workload (the usual)
    offering: str | None = None  # catalog offering slug it was ordered from
