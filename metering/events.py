"""Metering events: budgets and their alerts, in the stream ``budget/<id>``.

A budget's id is derived from its organization and project (``selectors.budget_id_for``), so
setting the budget of a scope again appends to the same stream. Usage itself has no events:
it is derived from the scheduler's allocation events.
"""

from __future__ import annotations

from uuid import UUID

from events.types import DomainEvent, event_type

BUDGET_STREAM = "budget"


@event_type("metering.BudgetSet")
class BudgetSet(DomainEvent):
    """A monthly allowance, in milli-GPU-seconds (GPU-hours x 3,600,000)."""

    budget_id: UUID
    organization_id: UUID
    project_id: UUID | None
    limit_milli_gpu_seconds: int
    hard_stop: bool


@event_type("metering.BudgetCleared")
class BudgetCleared(DomainEvent):
    budget_id: UUID
    organization_id: UUID
    project_id: UUID | None


@event_type("metering.BudgetThresholdReached")
class BudgetThresholdReached(DomainEvent):
    """Usage of a UTC month (``YYYY-MM``) reached a share of the budget; once per threshold
    and month."""

    budget_id: UUID
    organization_id: UUID
    project_id: UUID | None
    month: str
    threshold_percent: int
    used_milli_gpu_seconds: int
    limit_milli_gpu_seconds: int
