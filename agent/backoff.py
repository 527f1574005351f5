"""When a loop of the agent may talk to the control plane again after a failure: doubling
delays up to a cap, and a fixed pause after a refused token (an operator may be rotating it)."""

from __future__ import annotations

import time

from agent.client import Unauthorized

UNAUTHORIZED_RETRY_S = 3.0
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.5, 5.0


class Backoff:
    """When a loop may talk to the control plane again after a failure."""

    def __init__(self) -> None:
        self.delay = BACKOFF_FIRST_S
        self.until = 0.0

    def ready(self) -> bool:
        return time.monotonic() >= self.until

    def failed(self, error: Exception) -> float:
        delay = UNAUTHORIZED_RETRY_S if isinstance(error, Unauthorized) else self.delay
        if not isinstance(error, Unauthorized):
            self.delay = min(self.delay * 2, BACKOFF_MAX_S)
        self.until = time.monotonic() + delay
        return delay

    def succeeded(self) -> None:
        self.delay = BACKOFF_FIRST_S
        self.until = 0.0
