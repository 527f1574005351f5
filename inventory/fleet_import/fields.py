"""Text fields of the YAML format, and the limits of both formats that catch typos
(``gpus: 80`` meant for memory) long before the columns would."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from inventory.fleet_import.problems import kind, problem

SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_NAME = 128  # of a node
MAX_GPUS_PER_NODE = 64
MAX_COUNT = 10_000
MAX_INT = 2_147_483_647  # PositiveIntegerField
MAX_BIGINT = 9_223_372_036_854_775_807


def _text(value: object) -> str:
    """Text as YAML reads it: a string, or a number written bare (``name: 42``); trimmed."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise problem(f"expected text, got {kind(value)}")
    return str(value).strip()


def _filled(value: str) -> str:
    if not value:
        raise problem("must not be empty")
    return value


def shaped(pattern: re.Pattern[str], shape: str) -> AfterValidator:
    """Text that is empty or matches ``pattern``: ``'eu central' is not a slug``."""

    def check(value: str) -> str:
        if value and not pattern.match(value):
            raise problem(f"{value!r} is not {shape}")
        return value

    return AfterValidator(check)


# Text that may be empty (a default applies), and text that must not be; each field adds its
# length (``Field(max_length=...)``) and shape.
Text = Annotated[str, BeforeValidator(_text)]
FilledText = Annotated[Text, AfterValidator(_filled)]
