"""The scheduling engine: a pure library. ``schedule(snapshot, pending, policy, now)`` returns
decisions; the same code runs in the scheduling service, the simulator and the tests."""

from scheduler.engine.cycle import schedule
from scheduler.engine.model import (
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
