"""The ledger's event types (the events app imports this module when the registry is ready)."""

from __future__ import annotations

from typing import Any

from events.types import DomainEvent, event_type, upcaster


@event_type("ledger.AccountOpened")
class AccountOpened(DomainEvent):
    owner: str


@event_type("ledger.Deposited", schema_version=2)
class Deposited(DomainEvent):
    amount_cents: int
    memo: str


@upcaster("ledger.Deposited", from_version=1)
def _deposited_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 carried ``amount`` in whole units and had no memo."""
    return {"amount_cents": data["amount"] * 100, "memo": ""}


@event_type("ledger.Withdrawn")
class Withdrawn(DomainEvent):
    amount_cents: int


@event_type("ledger.AccountClosed")
class AccountClosed(DomainEvent):
    reason: str
