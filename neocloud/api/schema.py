"""OpenAPI: every operation documents the error shape and its statuses, and creating POSTs
document ``Idempotency-Key``."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

# Built with inline_serializer: a declared field named "fields" would shadow Serializer.fields.
ErrorSerializer = inline_serializer(
    "Error",
    fields={
        "error": inline_serializer(
            "ErrorDetail",
            fields={
                "code": serializers.CharField(
                    help_text="Stable, machine-readable code, e.g. `not_found`."
                ),
                "message": serializers.CharField(),
                "fields": serializers.DictField(
                    child=serializers.ListField(child=serializers.CharField()),
                    help_text="Problems per request field.",
                ),
                "details": serializers.DictField(required=False),
            },
        )
    },
)


ERRORS_ALWAYS = {
    "401": "Not authenticated, or the API key is invalid, revoked or expired.",
    "403": "Authenticated, but not allowed (role, key scope, suspended organization).",
    "429": "Throttled; see `Retry-After`.",
}
ERRORS_WRITE = {
    "400": "Invalid input: see `fields` (`unknown_field`: a name the operation does not take).",
    "409": "Conflict with the current state (e.g. `last_owner`, `slug_taken`).",
}
# Creating and acting POSTs may also meet the organization's standing and the payment provider.
ERRORS_POST = {
    "402": "Payment required: `payment_required` (unpaid invoices, a spent budget) or"
    " `card_declined`.",
    "503": "Retry later: `payment_provider_unavailable`, `webhook_conflict`.",
}


class AutoSchema(SpectacularAutoSchema):
    def get_override_parameters(self) -> list[Any]:
        parameters = list(super().get_override_parameters())
        if self.method == "POST" and self._is_idempotent():
            parameters.append(
                OpenApiParameter(
                    "Idempotency-Key",
                    str,
                    OpenApiParameter.HEADER,
                    description="Repeat the request safely: the same key and body return the"
                    " stored response for 24 h; the same key with another body is 422.",
                )
            )
        return parameters

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        """A body that refuses names it does not take says so (``neocloud.api.bodies``)."""
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)  # type: ignore[no-untyped-call]
        closed = getattr(force_instance(serializer), "closed_schema", False)  # type: ignore[no-untyped-call]
        if direction == "request" and closed:
            schema["additionalProperties"] = False
        return schema

    def _is_idempotent(self) -> bool:
        action = getattr(self.view, "action", None)
        handler = getattr(self.view, action or self.method.lower(), None)
        return bool(getattr(handler, "idempotent", False))

    def _get_response_bodies(
        self, direction: Literal["request", "response"] = "response"
    ) -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        codes = dict(ERRORS_ALWAYS)
        if self.method in {"POST", "PUT", "PATCH", "DELETE"}:
            codes.update(ERRORS_WRITE)
        if self.method == "POST":
            codes.update(ERRORS_POST)
        elif self._is_list():
            codes["400"] = "Invalid filter or ordering."
            codes["404"] = "Invalid page cursor."
        if self.method == "POST" and self._is_idempotent():
            codes["422"] = "`Idempotency-Key` reused with a different request."
        if self._is_detail():
            codes["404"] = "No such object, or it belongs to another tenant."
        for code, description in codes.items():
            if code not in responses:
                body = self._get_response_for_code(ErrorSerializer, code)  # type: ignore[no-untyped-call]
                body["description"] = description
                responses[code] = body
        return responses

    def _is_detail(self) -> bool:
        return "{" in self.path

    def _is_list(self) -> bool:
        return self.method == "GET" and self._is_list_view()
