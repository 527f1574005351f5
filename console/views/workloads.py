"""Workloads: the list with its filters, a workload's page (status timeline, placement, why
it waits, queue position, logs, cancel)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
