"""Times every request for ``neocloud_api_request_duration_seconds``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from monitoring import instruments


class RequestMetricsMiddleware:
    """By the route's pattern, not its path: a workload's id in the path would make a series
    per workload. A request no route matched counts as ``unmatched``. Sync and async alike
    (under ASGI a sync middleware would hold a thread for every long poll)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        began = time.perf_counter()
        if iscoroutinefunction(self):
            return self._timed(request, began)
        return self._count(request, self.get_response(request), began)

    async def _timed(self, request: HttpRequest, began: float) -> HttpResponse:
        return self._count(request, await self.get_response(request), began)

    def _count(self, request: HttpRequest, response: HttpResponse, began: float) -> HttpResponse:
        match = getattr(request, "resolver_match", None)
        route = f"/{match.route}" if match is not None and match.route else "unmatched"
        instruments.request_finished(
            route, request.method or "", response.status_code, time.perf_counter() - began
        )
        return response
