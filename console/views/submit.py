"""New workload: from an offering or custom, with the engine's say before submitting."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
