"""docs/operations/security.md claims only what a test shows: every statement in its lists
names at least one test, and every test it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "operations" / "security.md"
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def statements() -> list[str]:
    """The page's list items, each with its continuation lines."""
    items: list[str] = []
    for line in PAGE.read_text().splitlines():
        if line.startswith("- "):
            items.append(line)
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
    return items


def test_every_statement_names_a_test() -> None:
    found = statements()

    assert len(found) > 20
    assert [item for item in found if not REFERENCE.search(item)] == []


def test_every_test_named_exists() -> None:
    named = {match for item in statements() for match in REFERENCE.findall(item)}
    missing = []
    for path, name in sorted(named):
        tree = ast.parse((ROOT / path).read_text())
        functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        if name not in functions:
            missing.append(f"{path}::{name}")

    assert missing == []
