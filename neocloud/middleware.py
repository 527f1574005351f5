"""Every request under one correlation id: the caller's ``X-Request-ID`` when acceptable,
else a new one. It is on the request (``request.correlation_id``, which the API's and the
console's actors take, so their events carry it), bound for the request's log lines, and
returned in the response's ``X-Request-ID``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from neocloud.core.correlation import HEADER, correlation_bound, correlation_from
from neocloud.core.logs import request_path

logger = logging.getLogger("neocloud.requests")


class CorrelationMiddleware:
    """First in ``MIDDLEWARE``, so that every other middleware's lines carry the id too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        correlation_id = correlation_from(request.headers.get(HEADER))
        request.correlation_id = correlation_id  # type: ignore[attr-defined]
        started = time.monotonic()
        with correlation_bound(correlation_id):
            response = self.get_response(request)
            logger.info(
                "request",
                extra={
                    "method": request.method,
                    "path": request_path(request),
                    "status": response.status_code,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                },
            )
        response[HEADER] = correlation_id
        return response
