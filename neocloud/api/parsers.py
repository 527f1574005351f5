"""The API reads JSON bodies only, and only JSON it can hold: nesting is bounded before the
decoder runs (its recursion would otherwise be a 500), and numbers are finite."""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions, parsers
from rest_framework.utils.json import strict_constant

# No request of this API nests deeper than a few levels; 32 leaves room and keeps the
# decoder's recursion far from Python's limit.
MAX_DEPTH = 32
BODY = "body"  # the field named when the problem is the body itself, not one of its fields
# Strings are consumed whole, so brackets inside them are not counted; a key is a string
# followed by a colon. A string that never closes runs to the end (possessively): retried from
# each escaped quote inside it, the scan would take quadratic time; the decoder refuses it.
_TOKEN = re.compile(r'("(?:[^"\\]|\\.)*+(?:"|\\?\Z))(\s*:)?|([\[{])|([\]}])', re.DOTALL)


def check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``text`` when its arrays and objects nest deeper than ``limit``, naming the
    top-level field the nesting is under (or the body)."""
    depth = 0
    field = BODY
    for string, colon, opening, closing in _TOKEN.findall(text):
        if opening:
            depth += 1
            if depth > limit:
                raise exceptions.ValidationError(
                    {field: [f"JSON nested deeper than {limit} levels."]}
                )
        elif closing:
            depth -= 1
            if depth <= 1:
                field = BODY
        elif colon and depth == 1:
            field = _key(string)


def _key(string: str) -> str:
    try:
        key = json.loads(string)
    except ValueError:
        return BODY
    return key if isinstance(key, str) else BODY


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser with a depth limit, and numbers too large for a float refused
    instead of read as infinity."""

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        try:
            text = codecs.getreader(encoding)(stream).read()
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        check_depth(text)
        try:
            return json.loads(text, parse_constant=strict_constant, parse_float=_finite)
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
