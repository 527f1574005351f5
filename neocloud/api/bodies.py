"""Request bodies that refuse a name they do not take.

DRF drops a field it does not know: ``"gpu_count": 4`` on a workload, whose field is
``gpus_per_node``, submitted one GPU and said nothing. A misspelt field is a client's bug to be
told about (Stripe answers ``parameter_unknown``), so every request serializer and every object
nested in one is a ``RequestSerializer`` (``tests/api/test_conventions.py`` holds it), which
answers 400 ``unknown_field`` naming each such field, before the fields it does take are
checked. The node agent's reports are the exception: an agent newer than the server may say
more than the server reads, and must not lose its heartbeat for it. Queries are held alike
(``QuerySerializer``, ``refuse_unknown``; lists through ``neocloud.api.queries``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.settings import api_settings

UNKNOWN_FIELD = "unknown_field"
# A body of thousands of unknown names gets an answer of a few of them.
MAX_REPORTED = 20
MAX_NAME_SHOWN = 100


class RequestSerializer(serializers.Serializer):  # type: ignore[type-arg]
    # The schema says ``additionalProperties: false`` unless the body takes names it does not
    # list (a job array's workload fields).
    closed_schema: ClassVar[bool] = True

    def accepted_names(self, data: Mapping[str, Any]) -> set[str]:
        """The names ``data`` may give: the writable fields (a read-only one is not set by a
        request, so naming it is as much a mistake)."""
        return {
            name
            for name, field in self.fields.items()
            if not field.read_only and not isinstance(field, serializers.HiddenField)
        }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            refuse_unknown(data, self.accepted_names(data))
        return super().to_internal_value(data)


class QuerySerializer(RequestSerializer):
    """A query's parameters: its fields, and DRF's ``format`` (which every view reads)."""

    def accepted_names(self, data: Mapping[str, Any]) -> set[str]:
        return super().accepted_names(data) | query_names()


def query_names(*names: str) -> set[str]:
    """``names`` and the ``format`` parameter every view reads."""
    return {*names, *filter(None, [api_settings.URL_FORMAT_OVERRIDE])}


def refuse_unknown(given: Iterable[str], accepted: set[str]) -> None:
    """Raises the ``unknown_field`` errors of the names of ``given`` not in ``accepted``."""
    unknown = [name for name in given if name not in accepted]
    if unknown:
        raise serializers.ValidationError(
            {
                str(name)[:MAX_NAME_SHOWN]: [_unknown(str(name), accepted)]
                for name in unknown[:MAX_REPORTED]
            }
        )


def _unknown(name: str, accepted: set[str]) -> ErrorDetail:
    known = difflib.get_close_matches(name, sorted(accepted), n=1)
    hint = f" Did you mean {known[0]}?" if known else ""
    return ErrorDetail(f"Unknown field.{hint}", code=UNKNOWN_FIELD)


def unknown_fields(codes: Any, path: str = "") -> list[str]:
    """The dotted paths (``items.0.gpu_count``) whose error is ``unknown_field``, in the
    nested codes of a ``ValidationError`` (``get_codes()``)."""
    if isinstance(codes, str):
        return [path] if codes == UNKNOWN_FIELD else []
    if isinstance(codes, list) and all(isinstance(code, str) for code in codes):
        return [path] if UNKNOWN_FIELD in codes else []  # one field's problems
    children: Any = codes.items() if isinstance(codes, dict) else enumerate(codes)
    return [
        found
        for key, child in children
        for found in unknown_fields(child, f"{path}.{key}" if path else str(key))
    ]
