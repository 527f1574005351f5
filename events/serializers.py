"""How the feeds of the log render an event (no logic here)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from events import selectors
from events.models import Event


class AuditEventSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """An event as the feeds show it: its data without credentials."""

    actor = serializers.SerializerMethodField()

    class Meta:
        model = Event
        fields = [
            "position",
            "type",
            "stream_type",
            "stream_id",
            "version",
            "data",
            "actor",
            "recorded_at",
        ]
        read_only_fields = fields

    def to_representation(self, event: Event) -> dict[str, Any]:
        shown: dict[str, Any] = super().to_representation(event)
        shown["data"] = selectors.audit_data(event)
        return shown

    def get_actor(self, event: Event) -> str | None:
        actor = event.metadata.get("actor")
        return str(actor) if actor is not None else None
