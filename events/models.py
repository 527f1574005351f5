"""Tables of the event store.

``Event`` is the log itself: append-only, enforced by database triggers (migration 0002).
``Checkpoint`` is each consumer's position, written in the transaction of its effects.
``Stream`` is a projection of the log kept by the store itself: every stream and its version.
"""

from __future__ import annotations

from django.db import models


class Event(models.Model):
    """One immutable fact. ``position`` is global and grows in commit order (see ``store``)."""

    position = models.BigAutoField(primary_key=True)
    stream_type = models.CharField(max_length=64)
    stream_id = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    type = models.CharField(max_length=128)
    schema_version = models.PositiveSmallIntegerField()
    data = models.JSONField()
    metadata = models.JSONField()
    # Copied out of ``metadata`` so the per-organization audit feed is an index scan.
    organization_id = models.UUIDField(null=True, blank=True)
    recorded_at = models.DateTimeField()

    class Meta:
        db_table = "events_event"
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(
                fields=["stream_type", "stream_id", "version"], name="events_stream_version_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["type", "position"], name="events_type_position_idx"),
            models.Index(fields=["organization_id", "position"], name="events_org_position_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.position} {self.type} {self.stream_type}/{self.stream_id}@{self.version}"


class Checkpoint(models.Model):
    """The last position a named consumer has fully applied."""

    name = models.CharField(max_length=128, primary_key=True)
    position = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "events_checkpoint"

    def __str__(self) -> str:
        return f"{self.name} @ {self.position}"


class Stream(models.Model):
    """Projection: each stream with its current version and last position."""

    stream_type = models.CharField(max_length=64)
    stream_id = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    last_position = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "events_stream"
        constraints = [
            models.UniqueConstraint(fields=["stream_type", "stream_id"], name="events_stream_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.stream_type}/{self.stream_id}@{self.version}"
