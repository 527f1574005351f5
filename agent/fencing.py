"""Self-fencing: an agent cut off from the control plane for longer than ``--fence-after-s``
stops its runs.

The control plane fails a node ``HEARTBEAT_TIMEOUT_S`` after its last heartbeat and requeues
its work elsewhere; a run that went on over here would then run twice, once unbilled. With a
fence shorter than that timeout, the agent stops its runs (SIGTERM, grace, SIGKILL, by the
watcher as for any stop) before they are requeued, and starts nothing new until the control
plane answers a heartbeat again; their ends wait in the outbox until then. Off (0) by default,
for operators who prefer running work to go on. Silence is measured from the last heartbeat
the control plane accepted, as the control plane measures it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from agent.state import LAUNCHED, RUNNING, RunRecord

log = logging.getLogger(__name__)


class Fence:
    """When the agent must fence itself; thread-safe."""

    def __init__(self, after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.after_s = after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._heard_at = clock()  # a new agent has its whole fence before the first answer
        self.fenced = False

    def heard(self) -> None:
        """The control plane accepted a heartbeat."""
        with self._lock:
            self._heard_at = self._clock()
            if self.fenced:
                log.warning("control plane heard again: fence lifted, new work may start")
            self.fenced = False

    def due(self) -> bool:
        """True once per silence, when it has lasted longer than ``after_s`` (never when 0)."""
        with self._lock:
            silent = self._clock() - self._heard_at
            if self.after_s <= 0 or self.fenced or silent <= self.after_s:
                return False
            self.fenced = True
        log.error(
            "no heartbeat answered for %.0f s (--fence-after-s %.0f): stopping every run;"
            " the control plane may have requeued them elsewhere",
            silent,
            self.after_s,
        )
        return True


def to_stop(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The runs a fence stops: alive, and not being stopped already."""
    return [r for r in records if r.phase in (LAUNCHED, RUNNING) and r.stop_requested_at is None]
