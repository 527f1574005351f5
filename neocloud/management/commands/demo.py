"""``manage.py demo``: the embedded default in one process.

Creates the demo data, starts the in-process workers (the consumers of the log and beat's
scheduling tick, which a production deployment runs as separate processes) and serves HTTP.
Without a broker, cycles and run starts happen right after the request that asks for them;
the tick ends runs whose time is up, every second.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from events.runner import consumers_start, projection_consumers

logger = logging.getLogger(__name__)
TICK_S = 1.0


class Command(BaseCommand):
    help = "Run the embedded demo: data, in-process workers and the web server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("demo_setup")
        stop = threading.Event()
        consumers_start(projection_consumers(), stop)
        threading.Thread(target=_tick, args=(stop,), name="scheduler-tick", daemon=True).start()
        try:
            # No autoreloader: it would run the server in a child without our workers.
            call_command("runserver", options["addrport"], use_reloader=False)
        finally:
            stop.set()


def _tick(stop: threading.Event) -> None:
    """Beat's scheduling tick, in process."""
    from scheduler import tasks

    try:
        while not stop.wait(TICK_S):
            try:
                tasks.tick()
            except Exception:
                logger.exception("scheduler tick failed; next one in %s s", TICK_S)
    finally:
        connection.close()
