"""``manage.py demo``: the embedded default in one process.

Creates the demo data, starts the in-process workers (the consumers of the log and beat's
scheduling tick, which a production deployment runs as separate processes) and serves HTTP.
Without a broker, cycles and run starts happen right after the request that asks for them;
the tick ends runs whose time is up, every second.

The demo has DEBUG on, a known SECRET_KEY and the ``admin``/``admin`` operator: it serves
loopback only, unless ``DEMO_ALLOW_PUBLIC=1`` asks for more, and then says what that exposes.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.commands.runserver import naiveip_re
from django.db import connection

from events.runner import consumers_start, projection_consumers
from neocloud.management.commands.demo_setup import KEY_FILE, OPERATOR

logger = logging.getLogger(__name__)
TICK_S = 1.0


class Command(BaseCommand):
    help = "Run the embedded demo: data, in-process workers and the web server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEMO:
            raise CommandError("manage.py demo needs NEOCLOUD_DEMO=1 (`make demo` sets it)")
        warning = exposure(options["addrport"], allow_public=env_allow_public())
        if warning:
            self.stderr.write(self.style.WARNING(warning))
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


def env_allow_public() -> bool:
    return os.environ.get("DEMO_ALLOW_PUBLIC", "").strip().lower() in {"1", "true", "yes", "on"}


def exposure(addrport: str, *, allow_public: bool) -> str | None:
    """What serving at ``addrport`` exposes beyond this machine: None on loopback (runserver's
    default address too); refused unless ``allow_public``."""
    match = naiveip_re.match(addrport)
    if match is None:
        raise CommandError(f"{addrport!r} is not an address:port or a port")
    address = (match["addr"] or "127.0.0.1").strip("[]")
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name
        loopback = address == "localhost"
    if loopback:
        return None
    exposed = (
        f"the admin's operator login {OPERATOR[0]} / {OPERATOR[1]}, the demo API key"
        f" (var/{KEY_FILE}), DEBUG's error pages and the demo's known SECRET_KEY"
    )
    if not allow_public:
        raise CommandError(
            f"the demo serves loopback only: {address} would expose {exposed} to the network."
            " Set DEMO_ALLOW_PUBLIC=1 to serve it there anyway."
        )
    return f"DEMO_ALLOW_PUBLIC=1: serving on {address} exposes {exposed} to the network."


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
