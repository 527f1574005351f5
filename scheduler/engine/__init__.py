"""The scheduling engine: a pure library. ``schedule(snapshot, pending, policy, now)`` returns
decisions; the same code runs in the scheduling service, the simulator and the tests.

Compiled when a fresh build is there (``native``): the choice is made before any module of the
engine is imported."""

from scheduler.engine import native

NATIVE = native.use(__path__)  # whether the modules below are the compiled ones

from scheduler.engine.cycle import schedule  # noqa: E402 -- after the choice above
from scheduler.engine.model import (  # noqa: E402
    Allocation,
    Decisions,
    Node,
    PendingReason,
    Placement,
    Policy,
    Preemption,
    PreemptionCode,
    QueueConfig,
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    Topology,
)

__all__ = [
    "NATIVE",
    "Allocation",
    "Decisions",
    "Node",
    "PendingReason",
    "Placement",
    "Policy",
    "Preemption",
    "PreemptionCode",
    "QueueConfig",
    "ReasonCode",
    "Request",
    "Reservation",
    "Snapshot",
    "Topology",
    "schedule",
]
