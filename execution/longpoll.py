"""Long polls: read again every ``INTERVAL_S`` until the answer is worth sending or the
wait runs out. Callers go through the module (``longpoll.poll``), so a test that only wants
the answer may make them answer at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
INTERVAL_S = 0.3


def poll(read: Callable[[], T], done: Callable[[T], bool], wait_s: float) -> T:
    """``read()`` until ``done`` says its value will do, at most ``wait_s`` seconds; the last
    value read either way."""
    deadline = time.monotonic() + wait_s
    value = read()
    while not done(value):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(INTERVAL_S, left))
        value = read()
    return value
