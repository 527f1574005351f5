"""The roles and actions tables of docs/reference/permissions.md say what ``tenants.access``
does: the same actions, the same roles, scopes and suspension rule, and the same widest key
scopes per role."""

from __future__ import annotations

import re
from pathlib import Path

from tenants.access import OPERATORS, PERMISSIONS, ROLE_SCOPES, Action, Permission
from tenants.models import Role, Scope

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "permissions.md"


def table(header: str) -> list[list[str]]:
    """The rows of the page's table that starts with ``header``, as cells."""
    lines = PAGE.read_text().splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def names(cell: str) -> frozenset[str]:
    return frozenset(name.strip() for name in cell.split(","))


def test_the_actions_table_is_the_permission_table() -> None:
    documented: dict[Action, Permission] = {}
    for action, who, scope, suspended in table(
        "| action | who may | key scope | refused while suspended |"
    ):
        value = re.match(r"`([a-z_.]+)`", action)
        assert value, action
        roles = OPERATORS if who == "operators" else frozenset(Role(r) for r in names(who))
        documented[Action(value[1])] = Permission(
            roles, Scope(scope), starts_something=suspended == "yes"
        )

    assert documented == PERMISSIONS


def test_the_roles_table_gives_each_roles_widest_key() -> None:
    rows = table("| role | may (the actions below) | its keys carry at most |")
    documented = {
        Role(role.strip("`")): frozenset(Scope(s) for s in names(scopes))
        for role, _, scopes in rows
        if role.startswith("`")
    }

    assert documented == ROLE_SCOPES
