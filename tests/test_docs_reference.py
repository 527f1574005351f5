"""docs/reference/settings.md names every variable ``neocloud/settings.py`` reads from the
environment, each with its default, and no variable that nothing reads."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "neocloud" / "settings.py"
PAGE = ROOT / "docs" / "reference" / "settings.md"
HEADER = "| variable | default | meaning |"
# settings' own helpers that read one variable each (name, default), beside os.environ.get
READERS = {"env_bool", "env_json", "env_list"}
# where a default depends on another setting, the page says on what, in these words
DEPENDS_ON = {
    "DEMO": "demo",
    "EMBEDDED": "embedded default",
    "BASE_DIR": "checkout",
    "VAR_DIR": "NEOCLOUD_VAR_DIR",
}


def _reads_the_environment(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in READERS
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "get"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "environ"
    )


def read_by_settings() -> dict[str, ast.expr | None]:
    """Every variable settings read, with its default expression (None: no default)."""
    module = ast.parse(SETTINGS.read_text())
    helpers = [node for node in module.body if getattr(node, "name", None) in READERS]
    inside_helpers = {id(node) for helper in helpers for node in ast.walk(helper)}
    found: dict[str, ast.expr | None] = {}
    for node in ast.walk(module):
        if not isinstance(node, ast.Call) or not _reads_the_environment(node):
            continue
        if id(node) in inside_helpers:  # the helpers' own read of the name they are given
            continue
        name = node.args[0]
        assert isinstance(name, ast.Constant), ast.dump(node)
        assert isinstance(name.value, str), ast.dump(node)
        defaults = node.args[1:] + [k.value for k in node.keywords if k.arg == "default"]
        found[name.value] = defaults[0] if defaults else None
    return found


def documented() -> dict[str, tuple[str, str]]:
    """The page's rows as {variable: (its default cell, its meaning cell)}."""
    lines = PAGE.read_text().splitlines()
    rows: dict[str, tuple[str, str]] = {}
    for line in lines[lines.index(HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        names, default, meaning = (cell.strip() for cell in line.strip("|").split(" | ", 2))
        for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", names):
            rows[name] = (default, meaning)
    return rows


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`" if value != "" else "none"


def expected_default(default: ast.expr | None) -> list[str]:
    """What the default cell must contain: the value as the page shows it, or, for a default
    that depends on another setting, the words for that setting and each literal involved."""
    if default is None:
        return ["none"]
    names = {node.id for node in ast.walk(default) if isinstance(node, ast.Name)} - {"str"}
    if not names:
        value = eval(compile(ast.Expression(default), "<default>", "eval"), {"str": str})  # noqa: S307 - a literal expression of settings.py
        return [_shown(value)]
    literals = [
        node.value
        for node in ast.walk(default)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value
    ]
    return [DEPENDS_ON[name] for name in sorted(names)] + literals


SETTINGS_READ = read_by_settings()


@pytest.mark.parametrize("name", sorted(SETTINGS_READ))
def test_every_variable_settings_read_is_documented_with_its_default(name: str) -> None:
    rows = documented()

    assert name in rows, f"{name} is read by neocloud/settings.py but not on {PAGE.name}"
    cell, meaning = rows[name]
    missing = [part for part in expected_default(SETTINGS_READ[name]) if part not in cell]
    assert missing == [], f"{name}: the default cell {cell!r} lacks {missing}"
    assert meaning


def test_every_documented_variable_is_read_somewhere() -> None:
    sources = "\n".join(
        path.read_text()
        for path in ROOT.glob("**/*.py")
        if not path.is_relative_to(ROOT / "tests") and ".venv" not in path.parts
    )
    unread = [name for name in documented() if f'"{name}"' not in sources]

    assert unread == []
