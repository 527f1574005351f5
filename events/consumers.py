"""Consumers: named readers of the log with a checkpoint.

Delivery is at least once, effects exactly once: a batch's effects and the checkpoint that
moves past it commit in one transaction, so a consumer that dies between them rolls both back
and, restarted, handles the same events again from the old checkpoint. Effects outside the
database (tasks, e-mails, Stripe) must be started with ``transaction.on_commit``.

The checkpoint row is locked for the batch (``SELECT … FOR UPDATE``): two copies of one
consumer take turns instead of handling the same events twice.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from typing import ClassVar

from django.conf import settings
from django.db import transaction

from events import store
from events.models import Checkpoint
from events.projections import Projection
from events.store import RecordedEvent
from events.wakeup import Listener

logger = logging.getLogger(__name__)


class Consumer(ABC):
    """Reads the log in position order and applies effects."""

    name: ClassVar[str]
    batch_size: ClassVar[int] = 500

    @property
    def event_types(self) -> frozenset[str] | None:
        """The types this consumer reads; ``None`` for every type."""
        return None

    @abstractmethod
    def handle(self, event: RecordedEvent) -> None:
        """Apply one event's effects; called inside the batch's transaction."""

    def handle_batch(self, events: list[RecordedEvent]) -> None:
        """Apply a batch in position order; override to fold it into fewer writes."""
        for event in events:
            self.handle(event)


class ProjectionConsumer(Consumer):
    """Runs an asynchronous projection as a consumer."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection
        self.name = f"projection:{projection.name}"  # type: ignore[misc]
        self.batch_size = projection.batch_size  # type: ignore[misc]

    @property
    def event_types(self) -> frozenset[str] | None:
        return self.projection.event_types

    def handle(self, event: RecordedEvent) -> None:
        self.projection.apply(event)

    def handle_batch(self, events: list[RecordedEvent]) -> None:
        self.projection.apply_batch(events)


def checkpoint_position(name: str) -> int:
    row = Checkpoint.objects.filter(name=name).values_list("position", flat=True).first()
    return row or 0


def consumer_process_batch(consumer: Consumer) -> int:
    """Handle the next batch after the checkpoint in one transaction; returns its size."""
    Checkpoint.objects.get_or_create(name=consumer.name)
    with transaction.atomic():
        checkpoint = Checkpoint.objects.select_for_update().get(name=consumer.name)
        types = consumer.event_types
        # Read the head first: every position up to it has committed (the append lock), so
        # a short filtered batch proves nothing of interest lies between it and the head.
        head = store.head_position() if types is not None else 0
        batch = store.read_all(after=checkpoint.position, limit=consumer.batch_size, types=types)
        consumer.handle_batch(batch)
        position = batch[-1].position if batch else checkpoint.position
        if types is not None and len(batch) < consumer.batch_size:
            position = max(position, head)
        if position != checkpoint.position:
            Checkpoint.objects.filter(name=consumer.name).update(position=position)
    return len(batch)


def consumer_catch_up(consumer: Consumer) -> int:
    """Process batches until the consumer has reached the head; returns events handled."""
    total = 0
    while True:
        handled = consumer_process_batch(consumer)
        total += handled
        if handled < consumer.batch_size:
            return total


def consumer_run(
    consumer: Consumer, *, stop: threading.Event | None = None, poll_interval: float | None = None
) -> None:
    """Run until ``stop`` is set, woken by appends (LISTEN/NOTIFY) and polling as fallback."""
    stop = stop or threading.Event()
    interval = settings.EVENTS_POLL_INTERVAL_S if poll_interval is None else poll_interval
    # Listen before the first read: an append between the read and the wait still wakes us.
    with Listener() as listener:
        while not stop.is_set():
            consumer_catch_up(consumer)
            listener.wait(interval)
