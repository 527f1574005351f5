"""docs/reference/limits.md names every limit settings read with its default, shows each limit
fixed in the code with its value, and answers only error codes that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from neocloud.management.reference import error_codes_page
from tests.test_docs_reference import SETTINGS_READ, expected_default

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "limits.md"
LIMIT = re.compile(r"_PER_|_MAX_|^MAX_|_MAX$|_LIMIT$|^THROTTLE_RATE_")


def rows(header: str) -> dict[str, tuple[str, str]]:
    """The rows of the table under ``header`` as {its second cell: (value, past it)}."""
    lines = PAGE.read_text().splitlines()
    found = {}
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("|"):
            break
        _, name, value, past = (cell.strip() for cell in line.strip("|").split(" | "))
        found[name.strip("`")] = (value, past)
    return found


SETTINGS_ROWS = rows("| limit | setting | default | past it |")
CODE_ROWS = rows("| limit | constant | value | past it |")


@pytest.mark.parametrize("name", sorted(name for name in SETTINGS_READ if LIMIT.search(name)))
def test_every_limit_setting_is_on_the_page_with_its_default(name: str) -> None:
    assert name in SETTINGS_ROWS, f"{name} is a limit settings read but not on {PAGE.name}"
    cell = SETTINGS_ROWS[name][0]
    assert [part for part in expected_default(SETTINGS_READ[name]) if part not in cell] == []


def _value(dotted: str) -> Any:
    """``module.NAME`` or ``module.Class.attribute``: the longest importable module, then
    attributes."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            value = getattr(value, attribute)
        return value
    raise AssertionError(f"{dotted} names no module")


@pytest.mark.parametrize("constant", sorted(CODE_ROWS))
def test_every_limit_in_the_code_has_the_value_the_page_shows(constant: str) -> None:
    assert CODE_ROWS[constant][0] == f"`{_value(constant)}`"


def test_every_setting_row_is_a_setting_read() -> None:
    assert set(SETTINGS_ROWS) - set(SETTINGS_READ) == set()


def test_the_codes_answered_past_a_limit_exist() -> None:
    known = set(re.findall(r"^\| `(\w+)` \| \d+ \|", error_codes_page(), re.MULTILINE))
    named = {
        code
        for _, past in [*SETTINGS_ROWS.values(), *CODE_ROWS.values()]
        for code in re.findall(r"(?:\d{3}|,) `(\w+)`", past)
    }

    assert "too_much_waiting" in named
    assert named - known == set()
