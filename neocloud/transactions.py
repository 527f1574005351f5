"""Running a service in a transaction, again when the log says the state moved under it."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import transaction

from events.errors import StreamConflict

P = ParamSpec("P")
T = TypeVar("T")

ATTEMPTS = 3


def atomic_with_retry(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``function`` in a transaction; on ``StreamConflict`` run it again from the start.

    Services re-read what they decide on inside the call, so a retry decides on fresh state.
    After ``ATTEMPTS`` conflicts the last one is raised (HTTP 409, retryable).
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with transaction.atomic():
                return function(*args, **kwargs)
        except StreamConflict:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")
