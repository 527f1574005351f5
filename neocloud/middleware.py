"""Every request under one correlation id: the caller's ``X-Request-ID`` when acceptable,
else a new one. It is on the request (``request.correlation_id``, which the API's and the
console's actors take, so their events carry it), bound for the request's log lines, and
returned in the response's ``X-Request-ID``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from neocloud.core.correlation import HEADER, correlation_bound, correlation_from
from neocloud.core.logs import request_path

logger = logging.getLogger("neocloud.requests")


class CorrelationMiddleware:
    """First in ``MIDDLEWARE``, so that every other middleware's lines carry the id too. Sync
    and async alike (under ASGI a sync middleware would hold a thread for every long poll)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        correlation_id = correlation_from(request.headers.get(HEADER))
        request.correlation_id = correlation_id  # type: ignore[attr-defined]
        if iscoroutinefunction(self):
            return self._served(request, correlation_id)
        started = time.monotonic()
        with correlation_bound(correlation_id):
            response = self.get_response(request)
            _logged(request, response, started)
        response[HEADER] = correlation_id
        return response

    async def _served(self, request: HttpRequest, correlation_id: str) -> HttpResponse:
        started = time.monotonic()
        with correlation_bound(correlation_id):
            response: HttpResponse = await self.get_response(request)
            _logged(request, response, started)
        response[HEADER] = correlation_id
        return response


def _logged(request: HttpRequest, response: HttpResponse, started: float) -> None:
    logger.info(
        "request",
        extra={
            "method": request.method,
            "path": request_path(request),
            "status": response.status_code,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        },
    )
