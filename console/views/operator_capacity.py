"""Operators' capacity and fragmentation page: staff only; anyone else, signed in or not, gets
a 404, so the page's existence says nothing to a customer."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.utils import timezone

from console.guard import ConsoleRequest, signed_in
from console.selectors.operator_capacity import CHART_HOURS, capacity_panels


def _staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise Http404
        return view(request, *args, **kwargs)

    return guarded


@_staff_only
@signed_in
def capacity(request: ConsoleRequest) -> HttpResponse:
    context = {
        "panels": capacity_panels(timezone.now()),
        "chart_hours": CHART_HOURS,
    }
    return render(request, "console/operator/capacity.html", context)


urlpatterns: list[URLPattern] = [
    path("operator/capacity", capacity, name="operator-capacity"),
]
