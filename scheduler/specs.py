"""What a customer asks to run: the request fields of the engine plus the lifecycle policy.

Orders and the workloads API both build one; ``services.workload_submit`` validates it.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

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

# What a workload runs. Bounds keep a spec (and its event) small: the kernel's own limit on
# argv + environment is 2 MiB, far beyond what an honest request needs.
MAX_ARGS = 256
MAX_ARGV_BYTES = 32 * 1024  # all of argv, UTF-8
MAX_ARG_BYTES = 4096  # one argument
MAX_ENV = 128
MAX_ENV_VALUE_BYTES = 4096
MAX_SECRETS = 64
MAX_PORTS = 32
MAX_IMAGE_BYTES = 512
MAX_PATH_BYTES = 1024  # working_dir
# Variable names: POSIX, ``NEOCLOUD_*`` reserved (``tenants.secrets.variable_name_problem``).
# An OCI image reference, as the distribution project's grammar has it
# (github.com/distribution/reference, regexp.go):
#   reference := name [ ":" tag ] [ "@" digest ]
#   name      := [ domain "/" ] path-component [ "/" path-component ]*
#   domain    := host [ ":" port ];  host := domain-name | "[" ipv6 "]"
#   path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
#   tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
#   digest    := algorithm ":" hex{32,}
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"{_NAME}(?::{_TAG})?(?:@{_DIGEST})?")
MAX_IMAGE_NAME = 255  # the grammar's bound on the name part


class WorkloadKind(enum.StrEnum):
    JOB = "job"  # runs to completion; retried by ``retry_limit``
    SERVICE = "service"  # runs until cancelled; restarted by ``restart_policy``
    DEV = "dev"  # a dev environment (issue 32): SSH always, until stopped or idle


class RestartPolicy(enum.StrEnum):
    NEVER = "never"
    ON_FAILURE = "on_failure"
    ALWAYS = "always"


class PricePlan(enum.StrEnum):
    ON_DEMAND = "on_demand"
    PREEMPTIBLE = "preemptible"
    RESERVED = "reserved"


# --- Volumes (issue 32, docs/user-guide/volumes.md) ---
MAX_VOLUMES = 16
# A volume is mounted at a path under this directory, which each run has of its own (a
# private one in its mount namespace, ``agent.volumes``): never a system directory, and
# always inside what the run sees.
VOLUME_MOUNT_ROOT = "/mnt"


@dataclass(frozen=True)
class VolumeMount:
    """A volume of the workload's project, seen by its runs at ``path``."""

    volume: uuid.UUID
    path: str
    read_only: bool = False


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
    # What it runs (``services.program.check_program`` holds the bounds). Where node agents
    # run it, work without an image needs a command (``services.submission``).
    command: tuple[str, ...] = ()  # argv; () = the image's own entrypoint
    image: str | None = None  # an OCI reference; None = the node's environment
    env: Mapping[str, str] = field(default_factory=dict)  # plain variables
    secrets: tuple[str, ...] = ()  # project secrets exposed as variables of their names
    working_dir: str | None = None  # absolute
    ports: tuple[int, ...] = ()  # a service's ports; where each is reached is reported later
    volumes: tuple[VolumeMount, ...] = ()  # ``services.volumes`` checks them
    # Web ports (issue 32): those of ``ports`` the gateway serves at a URL of their own. Not
    # a program field: orders and offerings do not carry it.
    http_ports: tuple[int, ...] = ()
    # SSH (issue 32): the agent runs an sshd for the run, open to its project's members' keys.
    ssh: bool = False
    idle_stop_s: float | None = None  # a dev environment's; None: DEV_IDLE_STOP_S


PROGRAM_FIELDS = ("command", "image", "env", "secrets", "working_dir", "ports")


def program(given: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's program fields from what a request gave (absent: the spec's defaults)."""
    found: dict[str, Any] = {}
    for name in PROGRAM_FIELDS:
        value = given.get(name)
        if value is None:
            continue
        found[name] = tuple(value) if isinstance(value, list) else value
    return found
