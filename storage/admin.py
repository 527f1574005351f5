"""Operators browse volumes here; they are made and deleted through the API's services."""

from __future__ import annotations

from django.contrib import admin

from storage.models import Volume
from tenants.service_admin import ReadOnlyServiceAdmin


@admin.register(Volume)
class VolumeAdmin(ReadOnlyServiceAdmin):
    list_display = ("name", "project", "cluster", "type", "size_gb", "node_id", "status")
    list_filter = ("type", "status")
