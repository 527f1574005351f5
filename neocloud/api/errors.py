"""One JSON error shape for everything under ``/api/``.

``{"error": {"code": "...", "message": "...", "fields": {...}}}``: ``code`` is stable and
documented, ``fields`` maps a request field to its problems.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from neocloud.api.bodies import MAX_REPORTED, UNKNOWN_FIELD, unknown_fields
from neocloud.core.errors import ApplicationError


def error_body(
    code: str, message: str, fields: dict[str, Any] | None = None, **details: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "fields": fields or {}}
    if details:
        body["details"] = details
    return {"error": body}


def _field_errors(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {key: _messages(value) for key, value in detail.items()}
    return {}


def _messages(detail: Any) -> list[str]:
    """A field's problems as strings; an item's or a key's (``{"0": [...]}`` of a list or a
    mapping) say which: ``0: Null characters are not allowed.``"""
    if isinstance(detail, dict):
        return [
            f"{key}: {message}" for key, value in detail.items() for message in _messages(value)
        ]
    if isinstance(detail, list):
        return [message for item in detail for message in _messages(item)]
    return [str(detail)]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler, rewritten into the one error shape."""
    if isinstance(exc, ApplicationError):
        return Response(
            error_body(exc.code, exc.message, exc.fields, **exc.details), status=exc.http_status
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("No such resource.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _field_errors(exc.detail)
        non_field = fields.pop("non_field_errors", None)
        message = non_field[0] if non_field else "The request is invalid."
        if isinstance(exc.detail, list) and exc.detail:
            message = str(exc.detail[0])
        kind = "invalid"
        if unknown := unknown_fields(exc.get_codes()):
            more = len(unknown) - MAX_REPORTED
            named = ", ".join(unknown[:MAX_REPORTED]) + (f" and {more} more" if more > 0 else "")
            kind, message = UNKNOWN_FIELD, f"Not a field of this request: {named}."
        response.data = error_body(kind, message, fields)
    elif isinstance(exc, exceptions.APIException):
        code = exc.get_codes()
        response.data = error_body(
            code if isinstance(code, str) else exc.default_code, str(exc.detail)
        )
    return response


def json_not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        error_body("not_found", "No such resource."), status=status.HTTP_404_NOT_FOUND
    )


def json_server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        error_body("server_error", "Internal error; it has been logged."),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )
