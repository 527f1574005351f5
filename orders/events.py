"""Order events. Each order is its own stream (``order/<id>``, with its organization in the
metadata, so the audit feed shows it); the approval threshold is ``order_policy/approval``."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events.types import DomainEvent, event_type

ORDER_STREAM = "order"
POLICY_STREAM = "order_policy"
APPROVAL_POLICY_ID = "approval"


@event_type("orders.OrderSubmitted")
class OrderSubmitted(DomainEvent):
    """The order as asked, resolved against the catalog, with the price at that moment."""

    order_id: UUID
    project_id: UUID
    offering: str
    kind: str
    region: str
    price_plan: str
    gpu_model: str  # as asked; "" for any of the offering's
    gpu_models: list[str]
    quantity: int
    gpus_per_node: int
    nodes: int
    gpu_milli: int
    gpus: int
    runtime_estimate_s: int | None
    starts_at: datetime | None
    ends_at: datetime | None
    price_per_gpu_hour_minor: int
    currency: str
    estimated_cost_minor: int | None
    name: str  # of the workload; "" for one made from the offering
    # What its workload runs, resolved against the offering; orders recorded before orders
    # carried a program have none of these. ``secrets`` are names only.
    command: list[str] = []
    image: str | None = None
    env: dict[str, str] = {}
    secrets: list[str] = []
    working_dir: str | None = None
    ports: list[int] = []


@event_type("orders.OrderValidated")
class OrderValidated(DomainEvent):
    """Catalog, organization, quotas and payment standing passed."""

    needs_approval: bool
    reason: str


@event_type("orders.OrderApproved")
class OrderApproved(DomainEvent):
    automatic: bool


@event_type("orders.OrderRejected")
class OrderRejected(DomainEvent):
    code: str
    reason: str


@event_type("orders.OrderFulfilled")
class OrderFulfilled(DomainEvent):
    workload_id: UUID | None
    reservation_id: UUID | None


@event_type("orders.OrderCancelled")
class OrderCancelled(DomainEvent):
    reason: str


@event_type("orders.OrderClosed")
class OrderClosed(DomainEvent):
    reason: str


@event_type("orders.ApprovalThresholdSet")
class ApprovalThresholdSet(DomainEvent):
    threshold_gpus: int
