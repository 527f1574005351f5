"""``manage.py demo``: the embedded default in one process.

Creates the demo data, starts the in-process workers (the consumers of the log and beat's
scheduling tick, which a production deployment runs as separate processes), one real node agent
with fake GPUs for the node of ``examples/demo-agent.yaml``, and serves HTTP.
Without a broker, cycles and run starts happen right after the request that asks for them;
the tick ends runs whose time is up, every second.

The demo has DEBUG on, a known SECRET_KEY and the ``admin``/``admin`` operator: it serves
loopback only, unless ``DEMO_ALLOW_PUBLIC=1`` asks for more, and then says what that exposes.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.commands.runserver import naiveip_re
from django.db import connection

from events.runner import consumers_start, projection_consumers
from inventory import services as inventory_services
from inventory.lifecycle import NodeState
from neocloud.core.transactions import atomic_with_retry
from neocloud.management.commands.demo_setup import (
    AGENT_GPU_MODEL,
    AGENT_TOKEN_FILE,
    CUSTOMER,
    KEY_FILE,
    OPERATOR,
    agent_node_of_demo,
)
from tenants.access import Actor

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
        logging.getLogger("django.server").addFilter(_WithoutAgentRequests())
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _exit_on_signal)
        agent = _agent_start(options["addrport"])
        try:
            self.stdout.write(
                f"console:           http://{options['addrport']}/  (sign in as"
                f" {CUSTOMER[0]} / {CUSTOMER[1]})"
            )
            threading.Thread(target=_agent_node_provision, args=(stop,), daemon=True).start()
            # No autoreloader: it would run the server in a child without our workers.
            call_command("runserver", options["addrport"], use_reloader=False)
        finally:
            stop.set()
            _agent_stop(agent)


def _exit_on_signal(signum: int, frame: object) -> None:
    """SIGTERM's (and SIGHUP's) default ends the process at once, skipping the ``finally``
    that stops the agent, which then ran on with no server to report to: exit as Ctrl-C
    does instead."""
    raise SystemExit(128 + signum)


def _agent_stop(agent: subprocess.Popen[bytes]) -> None:
    """The agent leaves its runs running, as on a real server; one that does not stop in
    time is killed."""
    agent.terminate()
    try:
        agent.wait(10)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


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


class _WithoutAgentRequests(logging.Filter):
    """The agent's heartbeats and long polls, every few seconds, would bury the requests a
    user makes in the server's output (they are in var/agent.log from the agent's side)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _AGENT_PATH.search(record.getMessage())  # '"GET /api/v1/... HTTP/1.1" 200'


_AGENT_PATH = re.compile(r"/api/v1/nodes/[^/ ]+/(heartbeat|assignments|reports|logs)\b")


def _agent_start(addrport: str) -> subprocess.Popen[bytes]:
    """``neocloud-agent`` for the demo's agent node, with fake GPUs, logging to var/."""
    match = naiveip_re.match(addrport)  # exposure() checked it
    host = ((match["addr"] if match else "") or "127.0.0.1").strip("[]")
    host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host  # noqa: S104
    url = f"http://{host}:{match['port'] if match else 8000}"
    command = [
        sys.executable,
        "-m",
        "agent.cli",
        "--url",
        url,
        "--node-id",
        str(agent_node_of_demo().pk),
        "--token-file",
        str(settings.VAR_DIR / AGENT_TOKEN_FILE),
        "--state-dir",
        str(settings.VAR_DIR / "agent"),
        "--fake-gpus",
        "4",
        "--gpu-model",
        AGENT_GPU_MODEL,
    ]
    log = (settings.VAR_DIR / "agent.log").open("ab")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEOCLOUD_DEMO", "DJANGO"))}
    logger.info("node agent: %s (log var/agent.log)", url)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)  # noqa: S603


def _agent_node_provision(stop: threading.Event) -> None:
    """Provision the agent's node once its agent has reported in (its GPU check needs that)."""
    try:
        while not stop.wait(1.0):
            node = agent_node_of_demo()
            if node.state != NodeState.REGISTERED:
                return
            if node.last_heartbeat_at is not None:
                atomic_with_retry(
                    inventory_services.node_provision, actor=Actor.system_actor("demo"), node=node
                )
                return
    except Exception:
        logger.exception("could not provision the demo's agent node")
    finally:
        connection.close()


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
