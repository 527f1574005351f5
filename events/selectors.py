"""Reads of the log for its feeds. The log knows no tenant: callers decide who may see what
and pass it as plain values (an organization's id), so this imports no app."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import QuerySet

from events import projections, store
from events.consumers import Consumer, checkpoint_position
from events.models import Checkpoint, Event
from neocloud.core.redaction import redact


def organization_events(*, organization_id: UUID) -> QuerySet[Event]:
    """Every event recorded for an organization: an index scan of the organization's id,
    copied out of each event's metadata at append."""
    return Event.objects.filter(organization_id=organization_id)


def audit_data(event: Event) -> dict[str, Any]:
    """What a feed shows of an event's data: everything a tenant's admin may see, never a
    credential or its hash (``key_hash``, ``token_hash``, a driver's secrets). Every feed of
    events renders their data through here."""
    shown: dict[str, Any] = redact(event.data)
    return shown


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """How far a consumer is behind the head of the log."""

    name: str
    position: int
    head: int
    # How long its oldest unhandled event has waited; 0 when none (``consumer_lag``: of the
    # types it reads; ``consumer_lags``, which knows checkpoints only by name: of any type).
    seconds: float

    @property
    def events(self) -> int:
        """Positions between its checkpoint and the head (events of any type)."""
        return self.head - self.position


def consumer_lag(consumer: Consumer, *, now: datetime) -> ConsumerLag:
    """The consumer's lag. In seconds it counts only events the consumer reads: a filtered
    consumer with nothing of interest after its checkpoint is not behind, whatever the head."""
    head = store.head_position()
    position = checkpoint_position(consumer.name)
    oldest = store.read_all(after=position, limit=1, types=consumer.event_types)
    seconds = max(0.0, (now - oldest[0].recorded_at).total_seconds()) if oldest else 0.0
    return ConsumerLag(name=consumer.name, position=position, head=head, seconds=seconds)


def consumer_lags(*, now: datetime) -> tuple[int, list[ConsumerLag]]:
    """The head's position and the lag of every consumer with a checkpoint or registered (an
    asynchronous projection that never ran is behind by the whole log)."""
    head = store.head_position()
    positions = {f"projection:{p.name}": 0 for p in projections.asynchronous()}
    positions.update(Checkpoint.objects.values_list("name", "position"))
    lags = []
    for name, position in sorted(positions.items()):
        oldest = (
            Event.objects.filter(position__gt=position)
            .order_by("position")
            .values_list("recorded_at", flat=True)
            .first()
        )
        seconds = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
        lags.append(ConsumerLag(name, position, max(head, position), seconds))
    return head, lags
