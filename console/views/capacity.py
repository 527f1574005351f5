"""Queues and quotas, and reservations."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
