"""The engine's inputs and outputs: frozen values, no behaviour beyond small derived figures.

Units: GPU shares in milli-GPU (1000 = one whole GPU), CPU in milli-cores, memory in MiB,
times in seconds on the caller's clock (the engine never reads a clock).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, cast

WHOLE: Final = 1000  # milli-GPU in one GPU


class Value:
    """A frozen value that copies and pickles by being made again from its fields: compiled
    (``native``), a frozen dataclass refuses to be given them one by one once made."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        made = fields(cast(Any, self))  # every Value is a dataclass
        return (_remade, (type(self), {f.name: getattr(self, f.name) for f in made if f.init}))


def _remade(cls: type[Value], values: dict[str, Any]) -> Value:
    return cls(**values)


class Topology(enum.StrEnum):
    """Where the GPUs of one workload must sit."""

    ANY = "any"
    SINGLE_NODE = "single_node"
    SAME_NVLINK_DOMAIN = "same_nvlink_domain"  # every node's share within one NVLink domain
    SAME_RACK = "same_rack"


@dataclass(frozen=True, slots=True)
class Node(Value):
    """A node as the scheduler sees it: capacity and topology, not what runs on it."""

    name: str
    gpu_model: str | None
    gpu_domains: tuple[int, ...]  # NVLink domain of each GPU, by GPU index
    cpu_milli: int
    memory_mib: int
    rack: str = ""
    schedulable: bool = True
    shareable: bool = False  # GPUs may be split in milli-GPU shares

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_domains)


@dataclass(frozen=True, slots=True)
class Request(Value):
    """A workload asking for GPUs.

    Whole GPUs: ``gpus_per_node`` x ``nodes`` (with ``gpu_milli`` = 1000). A fraction of one
    GPU: ``gpus_per_node=1``, ``nodes=1``, ``gpu_milli`` < 1000. CPU and memory are per node.
    A multi-node workload is a gang: all of its nodes start together or none does. An elastic
    gang names its minimum, ``min_nodes``: it starts with as many of its ``nodes`` as fit at
    once (all of them when they fit), never fewer than the minimum.
    """

    id: str
    queue: str
    gpus_per_node: int = 1
    nodes: int = 1
    gpu_milli: int = WHOLE
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: tuple[str, ...] = ()  # acceptable models, preferred first; () = any
    priority: int = 0
    preemptible: bool = False
    topology: Topology = Topology.ANY
    reservation: str | None = None
    runtime_estimate_s: float | None = None
    organization: str = ""
    project: str = ""
    submitted_at: float = 0.0
    min_nodes: int | None = None  # the gang minimum; None: all of ``nodes``
    # Only these nodes (by name): where the data of a local volume it mounts lives, or the
    # nodes with room for a new one. None: any node.
    nodes_allowed: frozenset[str] | None = None

    @property
    def least_nodes(self) -> int:
        """The fewest nodes the workload may start on (``min_nodes`` within 1..``nodes``)."""
        if self.min_nodes is None:
            return self.nodes
        return max(1, min(self.min_nodes, self.nodes))

    @property
    def fractional(self) -> bool:
        return self.gpu_milli < WHOLE

    @property
    def gpu_demand_milli(self) -> int:
        """All the GPU it asks for, in milli-GPU."""
        return self.gpus_per_node * self.nodes * self.gpu_milli

    def demand_on(self, nodes: int) -> int:
        """The GPU it takes on ``nodes`` nodes, in milli-GPU."""
        return self.gpus_per_node * nodes * self.gpu_milli

    @property
    def shape(self) -> tuple[int, int, int]:
        """What placement cares about: (GPUs per node, milli-GPU per GPU, nodes)."""
        return (self.gpus_per_node, self.gpu_milli, self.nodes)


@dataclass(frozen=True, slots=True)
class Placement(Value):
    """One node's part of an allocation: exact GPUs, and the share of each."""

    node: str
    gpus: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Allocation(Value):
    """GPUs held by a workload (running, or granted in this cycle)."""

    workload: str
    queue: str
    gpu_model: str | None
    placements: tuple[Placement, ...]
    priority: int = 0
    preemptible: bool = False
    organization: str = ""
    started_at: float = 0.0
    ends_at: float | None = None  # by the runtime estimate; None: unknown
    reservation: str | None = None
    # Milli-GPU held on all its nodes, worked out once: quotas and preemption's order read it
    # at every grant, release and preemption.
    gpu_milli: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        held = sum(len(p.gpus) * p.gpu_milli for p in self.placements)
        object.__setattr__(self, "gpu_milli", held)


@dataclass(frozen=True, slots=True)
class Snapshot(Value):
    """A cluster at one instant: its nodes and what is allocated on them."""

    nodes: tuple[Node, ...]
    allocations: tuple[Allocation, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueConfig(Value):
    """A queue (one per project) in a cohort, with nominal quota per GPU model (whole GPUs).

    A queue may borrow idle quota of its cohort up to ``borrowing_limit`` GPUs per model
    (None: no limit) and lends at most ``lending_limit`` of its own (None: all of it).
    """

    name: str
    cohort: str = ""
    nominal: Mapping[str, int] = field(default_factory=dict)
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0
    organization: str = ""


@dataclass(frozen=True, slots=True)
class Reservation(Value):
    """Capacity held for an owner (a queue) in a window: ``gpus`` of ``gpu_model``."""

    id: str
    queue: str
    gpu_model: str
    gpus: int
    starts_at: float
    ends_at: float


@dataclass(frozen=True, slots=True)
class Policy(Value):
    """How the cycle decides. Queues absent from ``queues`` have no quota limit; organizations
    absent from ``organizations`` have no limit of their own."""

    queues: Mapping[str, QueueConfig] = field(default_factory=dict)
    # An organization's quota per GPU model (whole GPUs): a cap on the sum of what the work of
    # all of its queues holds, besides each queue's nominal quota and borrowing.
    organizations: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()
    # Shapes the fleet is usually asked for, with their weights: placement keeps capacity able
    # to serve them. Empty: learned from the pending workloads of the cycle.
    typical_shapes: Mapping[tuple[int, ...], float] = field(default_factory=dict)
    # Past usage per queue and per organization in milli-GPU-hours, already decayed (see
    # ``fairshare``): fair share orders by it.
    usage_history: Mapping[str, float] = field(default_factory=dict)
    organization_usage: Mapping[str, float] = field(default_factory=dict)
    aging_priority_per_hour: float = 1.0  # waiting raises effective priority: no starvation
    # Aging counts waiting in whole steps of this many seconds (0: continuously, and then fair
    # share orders only work that arrived at the same instant).
    aging_step_s: float = 0.0
    backfill: bool = True


class ReasonCode(enum.StrEnum):
    NO_MATCHING_MODEL = "no_matching_model"
    FRAGMENTED = "fragmented"
    INSUFFICIENT = "insufficient_capacity"
    QUOTA = "quota"
    GANG = "gang"
    RESERVED = "reserved"
    # Work on a reservation runs only in its window, on its model, within its GPUs.
    OUTSIDE_RESERVATION = "outside_reservation"
    RESERVATION_FULL = "reservation_full"
    BEHIND_HIGHER_PRIORITY = "behind_higher_priority"
    TOPOLOGY = "topology"
    STANDING = "organization_standing"  # held back: its organization may start nothing now
    VOLUME_LOCALITY = "volume_locality"  # its nodes_allowed (a local volume's node) are full


@dataclass(frozen=True, slots=True)
class PendingReason(Value):
    """Why a workload waits: a stable code, a sentence a person can act on, and figures."""

    code: ReasonCode
    message: str
    figures: Mapping[str, object] = field(default_factory=dict)


class PreemptionCode(enum.StrEnum):
    """Why running work was taken back (each path of preemption has one)."""

    PRIORITY = "priority"  # lower-priority preemptible work, for capacity
    RECLAIM = "reclaim"  # a borrower's work, for a queue taking back its nominal quota
    RESERVATION = "reservation"  # for work on a reservation, on the capacity its window holds
    QUOTA = "quota"  # the queue's own lower-priority work, to free the queue's quota


@dataclass(frozen=True, slots=True)
class Preemption(Value):
    """A victim taken back for a workload: a stable code and a sentence a person can read."""

    victim: str
    for_workload: str
    code: PreemptionCode
    reason: str


@dataclass(frozen=True, slots=True)
class Decisions(Value):
    allocations: tuple[Allocation, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: Mapping[str, PendingReason] = field(default_factory=dict)
