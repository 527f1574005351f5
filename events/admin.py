"""A read-only browser of the log for operators."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from events.models import Checkpoint, Event, Stream


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Nothing here can be added, changed or deleted: the log is append-only."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("position", "type", "stream_type", "stream_id", "version", "recorded_at")
    list_filter = ("type", "stream_type")
    search_fields = ("=stream_id", "=organization_id", "type")
    readonly_fields = (
        "position",
        "stream_type",
        "stream_id",
        "version",
        "type",
        "schema_version",
        "organization_id",
        "recorded_at",
        "pretty_data",
        "pretty_metadata",
    )
    exclude = ("data", "metadata")
    show_full_result_count = False  # COUNT(*) over the whole log on every page is costly

    @admin.display(description="data")
    def pretty_data(self, obj: Event) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.data, indent=2, sort_keys=True))

    @admin.display(description="metadata")
    def pretty_metadata(self, obj: Event) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.metadata, indent=2, sort_keys=True))


@admin.register(Stream)
class StreamAdmin(ReadOnlyAdmin):
    list_display = ("stream_type", "stream_id", "version", "last_position", "updated_at")
    list_filter = ("stream_type",)
    search_fields = ("=stream_id",)


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("name", "position", "updated_at")
