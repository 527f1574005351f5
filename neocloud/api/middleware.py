"""Errors under ``/api/`` are always JSON, in DEBUG too."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse

from neocloud.api.errors import json_not_found, json_server_error

logger = logging.getLogger(__name__)


class JsonApiErrorsMiddleware:
    """Turns Django's HTML 404 and 500 pages into the API's error shape on API paths."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
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
