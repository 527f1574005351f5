"""Rebuilding projections from position 0."""

from __future__ import annotations

from collections.abc import Collection

from django.db import transaction

from events import projections, store
from events.consumers import ProjectionConsumer, consumer_catch_up
from events.models import Checkpoint


def projections_replay(*, names: Collection[str] | None = None, batch_size: int = 2000) -> int:
    """Empty the selected projections' tables and apply the whole log again.

    Synchronous projections are rebuilt in one transaction holding the append lock, so no
    append interleaves with the rebuild; asynchronous ones restart their consumer from 0.
    Returns the number of events read.
    """
    chosen = [p for p in projections.synchronous() if names is None or p.name in names]
    read = 0
    with transaction.atomic():
        store.take_append_lock()
        kept = [projection.operational_keep() for projection in chosen]
        for projection in chosen:
            projection.reset()
        types = _union_of_types(chosen)
        if chosen and types != frozenset():
            for batch in store.iter_batches(batch_size=batch_size, types=types):
                read += len(batch)
                for projection in chosen:
                    wanted = projection.event_types
                    projection.apply_batch(
                        batch if wanted is None else [e for e in batch if e.type in wanted]
                    )
        for projection, values in zip(chosen, kept, strict=True):
            projection.operational_restore(values)
    for projection in projections.asynchronous():
        if names is not None and projection.name not in names:
            continue
        consumer = ProjectionConsumer(projection)
        with transaction.atomic():
            Checkpoint.objects.select_for_update().filter(name=consumer.name).update(position=0)
            values = projection.operational_keep()
            projection.reset()
            read += consumer_catch_up(consumer)
            projection.operational_restore(values)
    return read


def _union_of_types(chosen: list[projections.Projection]) -> frozenset[str] | None:
    union: set[str] = set()
    for projection in chosen:
        wanted = projection.event_types
        if wanted is None:
            return None
        union |= wanted
    return frozenset(union)
