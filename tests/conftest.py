"""Shared fixtures.

The log's triggers reject TRUNCATE (PostgreSQL) and DELETE (SQLite), which is how Django
empties the database after a transactional test. Tests may lift them for that one flush: the
trigger is disabled, or dropped, around it and restored at once.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations

from tests.builders import Builder

# Playwright's sync API keeps an event loop in the test's thread, which Django takes for an
# async context; the ORM calls tests make around the browser are synchronous all the same.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# Browser tests (pytest-playwright) drive the distribution's Chromium: Playwright's own download
# cannot be fetched here. ``make test`` installs Debian's package where missing (as root).
CHROMIUM = os.environ.get("NEOCLOUD_CHROMIUM") or shutil.which("chromium") or ""
# The flags this machine's network needs (no background connections it would refuse).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    if not CHROMIUM:
        pytest.skip("no chromium here (make test installs Debian's chromium as root)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


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


# Fixtures that leave threads running for the rest of the session (pytest-django's live server,
# Playwright's driver): the tests using them go last, so that no test forks a process that has
# them (a forked child inherits the locks other threads held, and can wait on them forever).
THREAD_LEAVING_FIXTURES = frozenset({"live_server", "page", "browser", "context"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(
        key=lambda item: bool(THREAD_LEAVING_FIXTURES & set(getattr(item, "fixturenames", ())))
    )
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
