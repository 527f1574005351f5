"""The suites' registry and what every suite reports beside its figures.

A suite measures; it never asserts. It returns one dict of figures, each with the baseline it
is compared against in the same run, the ratios, and the process's peak memory.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from scheduler.engine import NATIVE

Suite = Callable[[float], dict[str, Any]]

_suites: dict[str, Suite] = {}


def suite(name: str) -> Callable[[Suite], Suite]:
    """Register a suite; it takes a ``scale`` (1.0 = the documented sizes)."""

    def register(function: Suite) -> Suite:
        _suites[name] = function
        return function

    return register


def suites() -> dict[str, Suite]:
    return dict(_suites)


def engine_build() -> str:
    """Which engine the figures are of: ``native`` (compiled, ``scheduler/engine/native.py``)
    or ``python``."""
    return "native" if NATIVE else "python"


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


@contextmanager
def scratch_database() -> Iterator[None]:
    """Run inside a throwaway, migrated copy of the configured database (``<name>_bench_<pid>``).

    Benchmarks write hundreds of thousands of events; the real log must never receive them,
    and the log cannot be emptied afterwards (it is append-only), so the database is dropped.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    original = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"] = {
        **connection.settings_dict.get("TEST", {}),
        # Per process: two benchmarks at once must not drop each other's database.
        "NAME": f"{original}_bench_{os.getpid()}",
    }
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        connections.close_all()
        connection.creation.destroy_test_db(original, verbosity=0)
