"""Operators' capacity and fragmentation page: staff only (``console.staff``): a customer gets a
404, so the page's existence says nothing to them."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.utils import timezone

from console.guard import ConsoleRequest
from console.selectors.operator_capacity import CHART_HOURS, capacity_panels
from console.staff import staff_only


@staff_only
def capacity(request: ConsoleRequest) -> HttpResponse:
    context = {
        "panels": capacity_panels(timezone.now()),
        "chart_hours": CHART_HOURS,
    }
    return render(request, "console/operator/capacity.html", context)


urlpatterns: list[URLPattern] = [
    path("operator/capacity", capacity, name="operator-capacity"),
]
