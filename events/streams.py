"""The store's own projection: every stream with its version and last position."""

from __future__ import annotations

from collections.abc import Iterable

from events import projections
from events.models import Stream
from events.store import RecordedEvent


class StreamHeads(projections.Projection):
    """Keeps ``Stream`` rows; reads every event type, one upsert per batch.

    Asynchronous: nothing needs it read-your-writes, and it would cost every append a write.
    """

    name = "events.stream_heads"
    models = (Stream,)

    @property
    def event_types(self) -> frozenset[str] | None:
        return None

    def apply(self, event: RecordedEvent) -> None:
        self.apply_batch([event])

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        heads: dict[tuple[str, str], RecordedEvent] = {}
        for event in events:
            heads[(event.stream_type, event.stream_id)] = event
        if not heads:
            return
        Stream.objects.bulk_create(
            [
                Stream(
                    stream_type=event.stream_type,
                    stream_id=event.stream_id,
                    version=event.version,
                    last_position=event.position,
                    updated_at=event.recorded_at,
                )
                for event in heads.values()
            ],
            update_conflicts=True,
            unique_fields=["stream_type", "stream_id"],
            update_fields=["version", "last_position", "updated_at"],
        )


projections.register(StreamHeads(), synchronous=False)
