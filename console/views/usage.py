"""Usage: GPU-hours per day by project and model, as charts, the table behind them, CSV."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
