"""Shared fixtures.

The log's triggers reject TRUNCATE (PostgreSQL) and DELETE (SQLite), which is how Django
empties the database after a transactional test. Tests may lift them for that one flush: the
trigger is disabled, or dropped, around it and restored at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations

from tests.builders import Builder


@pytest.fixture(scope="session", autouse=True)
def _flush_lifts_append_only_trigger() -> Iterator[None]:
    original = DatabaseOperations.sql_flush

    def sql_flush(self: DatabaseOperations, style: Any, tables: Any, **kwargs: Any) -> list[str]:
        statements = original(self, style, tables, **kwargs)
        if "events_event" not in tables:
            return statements
        return [
            "ALTER TABLE events_event DISABLE TRIGGER events_event_no_truncate",
            *statements,
            "ALTER TABLE events_event ENABLE TRIGGER events_event_no_truncate",
        ]

    from django.db.backends.sqlite3 import base as sqlite

    SqliteOperations = sqlite.DatabaseWrapper.ops_class

    sqlite_original = SqliteOperations.sql_flush

    def sqlite_flush(self: Any, style: Any, tables: Any, **kwargs: Any) -> list[str]:
        """The embedded default has a DELETE trigger instead: dropped and made again."""
        statements = sqlite_original(self, style, tables, **kwargs)
        if "events_event" not in tables:
            return statements
        return [
            "DROP TRIGGER events_event_no_delete",
            *statements,
            "CREATE TRIGGER events_event_no_delete BEFORE DELETE ON events_event"
            " BEGIN SELECT RAISE(ABORT, 'events_event is append-only: DELETE rejected'); END",
        ]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign,assignment]
    SqliteOperations.sql_flush = sqlite_flush  # type: ignore[method-assign]
    yield
    DatabaseOperations.sql_flush = original  # type: ignore[method-assign]
    SqliteOperations.sql_flush = sqlite_original  # type: ignore[method-assign]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (this run is the embedded default)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def build() -> Builder:
    """Tenancy state made through the services."""
    return Builder()
