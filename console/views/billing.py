"""Billing: invoices, paying them, credits, budgets, payment methods."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
