"""What a customer asks to run: the request fields of the engine plus the lifecycle policy.

Orders and the workloads API both build one; ``services.workload_submit`` validates it.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import timedelta

from scheduler.engine import Topology

# Bounds of what may be asked for. Beyond them a number is a mistake, and a run's end
# (start + runtime) would overflow a datetime; the API and ``workload_submit`` both hold them.
MAX_RUNTIME_S = 10 * 365 * 86_400  # ten years
MAX_GPUS_PER_NODE = 1024
MAX_NODES = 4096
MAX_CPU_MILLI = 10_000_000  # ten thousand cores per node
MAX_MEMORY_MIB = 1 << 30  # a PiB per node
MAX_RETRY_LIMIT = 100
MAX_RESERVED_GPUS = 100_000
# A reservation may start a little in the past (the customer's clock and ours differ) and
# ends within the horizon: capacity is not promised for years ahead.
RESERVATION_START_TOLERANCE = timedelta(minutes=5)
RESERVATION_HORIZON = timedelta(days=366)


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
    topology: str = Topology.ANY
    runtime_estimate_s: float | None = None
    max_runtime_s: float | None = None
    retry_limit: int = 0
    restart_policy: RestartPolicy = RestartPolicy.NEVER
    region: str | None = None
    cluster: uuid.UUID | None = None
    reservation: uuid.UUID | None = None
    price_plan: PricePlan | None = None  # None: follows from the workload (the usual)
    offering: str | None = None  # catalog offering slug it was ordered from
