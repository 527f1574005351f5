"""Errors under ``/api/`` are always JSON, in DEBUG too."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import Http404, HttpRequest, HttpResponse

from neocloud.api.errors import json_not_found, json_server_error

logger = logging.getLogger(__name__)


class JsonApiErrorsMiddleware:
    """Turns Django's HTML 404 and 500 pages into the API's error shape on API paths. Sync
    and async alike (under ASGI a sync middleware would hold a thread for every long poll)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._served(request)
        return self._json(request, self.get_response(request))

    async def _served(self, request: HttpRequest) -> HttpResponse:
        return self._json(request, await self.get_response(request))

    def _json(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if (
            _is_api(request)
            and response.status_code == 404
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return json_not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not _is_api(request):
            return None
        if isinstance(exception, Http404):
            return json_not_found(request)
        logger.exception("unhandled error on %s", request.path, exc_info=exception)
        return json_server_error(request)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")
