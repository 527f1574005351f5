"""Waking consumers when the log grows.

On PostgreSQL a trigger on the log sends ``NOTIFY neocloud_events`` after every INSERT
(migration 0003), so the notification is delivered exactly when the events become visible;
a ``Listener`` blocks on LISTEN. On SQLite (one process, the embedded default) the
announcement is an in-process condition signalled on commit. Either way, ``wait`` also
returns after its timeout: polling is the fallback, never the pace.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import psycopg
from django.db import connection, transaction

CHANNEL = "neocloud_events"

_condition = threading.Condition()
_generation = 0


def announce() -> None:
    """Wake in-process listeners when the current transaction commits (PostgreSQL's trigger
    does this for every process)."""
    if connection.vendor != "postgresql":
        transaction.on_commit(_signal_local)


def _signal_local() -> None:
    global _generation
    with _condition:
        _generation += 1
        _condition.notify_all()


class Listener:
    """A dedicated connection LISTENing for appends (or the in-process signal)."""

    def __init__(self) -> None:
        self._connection: psycopg.Connection[Any] | None = None
        self._seen = _generation

    def __enter__(self) -> Listener:
        if connection.vendor == "postgresql":
            self._connection = psycopg.connect(**psycopg_params(), autocommit=True)
            self._connection.execute(f"LISTEN {CHANNEL}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def wait(self, timeout: float) -> bool:
        """Block until an append is announced or ``timeout`` passes; True when woken."""
        if self._connection is not None:
            woken = False
            for _ in self._connection.notifies(timeout=timeout, stop_after=1):
                woken = True
            # Drain what else queued up: one wake-up covers every append before it.
            for _ in self._connection.notifies(timeout=0):
                pass
            return woken
        with _condition:
            if _generation == self._seen:
                _condition.wait(timeout)
            woken = _generation != self._seen
            self._seen = _generation
            return woken


def psycopg_params() -> dict[str, Any]:
    """Connection parameters of Django's default database, for a raw psycopg connection."""
    settings = connection.settings_dict
    params = {
        "dbname": settings["NAME"],
        "user": settings.get("USER"),
        "password": settings.get("PASSWORD"),
        "host": settings.get("HOST"),
        "port": settings.get("PORT"),
    }
    params.update(
        {k: v for k, v in settings.get("OPTIONS", {}).items() if k in {"sslmode", "options"}}
    )
    return {key: value for key, value in params.items() if value}
