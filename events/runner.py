"""Running consumers in threads of one process (``events consume``, the embedded demo)."""

from __future__ import annotations

import logging
import threading
import time

from django.db import connection

from events import projections
from events.consumers import Consumer, ProjectionConsumer, consumer_run

logger = logging.getLogger(__name__)

RESTART_DELAY_S = 5.0


def projection_consumers() -> list[Consumer]:
    """A consumer for each asynchronous projection."""
    return [ProjectionConsumer(p) for p in projections.asynchronous()]


def consumers_start(consumers: list[Consumer], stop: threading.Event) -> list[threading.Thread]:
    """One daemon thread per consumer; a crashed consumer is logged and restarted, since its
    checkpoint makes a restart safe."""
    threads = [
        threading.Thread(target=_supervise, args=(c, stop), name=c.name, daemon=True)
        for c in consumers
    ]
    for thread in threads:
        thread.start()
    return threads


def _supervise(consumer: Consumer, stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            try:
                consumer_run(consumer, stop=stop)
            except Exception:
                logger.exception("consumer %s failed; restarting", consumer.name)
                time.sleep(RESTART_DELAY_S)
    finally:
        connection.close()
