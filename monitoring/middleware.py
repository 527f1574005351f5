"""Times every request for ``neocloud_api_request_duration_seconds``."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from monitoring import instruments


class RequestMetricsMiddleware:
    """By the route's pattern, not its path: a workload's id in the path would make a series
    per workload. A request no route matched counts as ``unmatched``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        began = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = f"/{match.route}" if match is not None and match.route else "unmatched"
        instruments.request_finished(
            route, request.method or "", response.status_code, time.perf_counter() - began
        )
        return response
