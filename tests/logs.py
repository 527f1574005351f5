"""Log lines as a deployment's stdout handler renders them, captured for a test."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from neocloud.core.logs import formatter


@contextmanager
def captured_log(fmt: str) -> Iterator[io.StringIO]:
    """What the stdout handler writes in ``fmt`` (``json`` in production, ``console`` in
    the demo), through the project's formatter, into a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(formatter(fmt))
    root, requests = logging.getLogger(), logging.getLogger("neocloud.requests")
    saved = root.level, requests.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    requests.setLevel(logging.INFO)  # quiet on the embedded default
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        requests.setLevel(saved[1])
