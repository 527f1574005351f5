"""The generated reference pages (docs/reference: error codes, events, commands, the OpenAPI
schema) are what ``manage.py docs_reference`` writes from the code now: an error code, an event
type, a command or an endpoint added without its page fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from neocloud.management.reference import DOCS, PAGES

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "run `manage.py docs_reference` on PostgreSQL and commit the pages"


@pytest.mark.parametrize(
    "page",
    [
        # The schema's integer bounds are the database's: PostgreSQL's, as in production.
        pytest.param(name, marks=pytest.mark.postgres) if name.endswith(".yaml") else name
        for name in PAGES
    ],
)
def test_the_committed_page_is_what_the_code_writes(page: str) -> None:
    committed = (DOCS / page).read_text()

    assert committed == PAGES[page](), f"docs/reference/{page} is stale: {REGENERATE}"


def _page_codes() -> dict[str, str]:
    rows = re.findall(r"^\| `(\w+)` \| \d+ \| [^|]* \| (.*?) \| ", PAGES["error-codes.md"](), re.M)
    return dict(rows)


def test_every_error_code_says_what_it_means() -> None:
    codes = _page_codes()

    assert "stream_conflict" in codes
    assert [code for code, meaning in codes.items() if not meaning.strip()] == []


def test_codes_written_without_an_exception_class_are_on_the_page() -> None:
    """``error_body("...")`` answers a code of its own (a body too large, a server error)."""
    written = set()
    for path in ROOT.glob("*/**/*.py"):
        if path.is_relative_to(ROOT / "tests") or ".venv" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "error_body"
                and isinstance(node.args[0], ast.Constant)
            ):
                written.add(node.args[0].value)

    assert {"body_too_large", "server_error"} <= written
    assert written - set(_page_codes()) == set()
