"""``manage.py demo``: the embedded default in one process.

Creates the demo data, starts the in-process workers (the consumers of the log that a
production deployment runs as separate processes) and serves HTTP.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from events.runner import consumers_start, projection_consumers


class Command(BaseCommand):
    help = "Run the embedded demo: data, in-process workers and the web server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("demo_setup")
        stop = threading.Event()
        consumers_start(projection_consumers(), stop)
        try:
            # No autoreloader: it would run the server in a child without our workers.
            call_command("runserver", options["addrport"], use_reloader=False)
        finally:
            stop.set()
