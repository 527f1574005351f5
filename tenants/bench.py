"""``manage.py bench api``: the tenancy API over HTTP, against a minimal Django view.

The suite seeds a scratch PostgreSQL database through the services (an organization, its
owner, ``SEED_PROJECTS`` projects and an owner's API key with every scope), starts gunicorn on
it, and drives three workloads with the same client, one after the other:

* ``baseline``: ``GET /bench/baseline``, a minimal Django JSON view (``neocloud.bench_urls``)
  served by the same gunicorn through the same middleware: the floor every request pays;
* ``list``: ``GET /api/v1/projects`` with the Bearer key (key lookup, throttle, tenant scope,
  cursor page of the seeded projects);
* ``create``: ``POST /api/v1/projects`` with a unique slug per request (a service call: row
  lock on the organization, event append, synchronous projection).

The figures are read as ratios against the baseline of the same run, so the machine cancels.

Server. ``gunicorn -k gthread --workers 2 --threads 4`` for all three workloads: one process
per core of the 2-core machine it was tuned on (the GIL allows one core per process), and a
few threads each so a worker keeps its core busy while a request waits on PostgreSQL. It gets
the settings the command was given, except: the scratch database, ``DEBUG=0``, a per-key
throttle of ``THROTTLE_RATE`` (so throttling never distorts the load) and
``neocloud.bench_settings`` (the project's settings with the baseline route). ``REDIS_URL`` is
passed through unchanged: set, the throttle counters live in Redis, as in production; unset,
in each worker's memory (``figures.cache`` says which).

Client. ``CLIENTS`` clients, each on its own persistent HTTP/1.1 connection, issue requests
back to back for a warm-up and then a measured window; a request counts when it completes
inside the window. They run as threads spread over ``CLIENT_PROCESSES`` forked processes so
the client's own GIL is not the ceiling (measured on 2 cores: 1 process capped the baseline;
2 processes matched 4). Non-2xx responses and connection failures count as ``errors``.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection, connections

from neocloud.bench import peak_rss_mb, scratch_database, suite
from neocloud.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.models import Scope
from tenants.services import api_key_create, organization_create, project_create, user_register

CLIENTS = 16
CLIENT_PROCESSES = 2
SERVER_WORKERS = 2
SERVER_THREADS = 4
SEED_PROJECTS = 20
THROTTLE_RATE = "1000000/min"
SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 30.0
SETTINGS_MODULE = "neocloud.bench_settings"


# --- seed ------------------------------------------------------------------------------------


def _seed() -> tuple[str, str]:
    """The organization's id and the owner's API key secret, created through the services."""
    actor = Actor.system_actor("bench")
    owner = atomic_with_retry(
        user_register, actor=actor, email="owner@bench.example", full_name="Bench Owner"
    )
    organization = atomic_with_retry(
        organization_create, actor=actor, name="Bench Lab", owner=owner, slug="bench-lab"
    )
    for n in range(SEED_PROJECTS):
        atomic_with_retry(
            project_create,
            actor=actor,
            organization=organization,
            name=f"Seeded {n}",
            slug=f"seeded-{n}",
        )
    _, secret = atomic_with_retry(
        api_key_create,
        actor=actor,
        organization=organization,
        name="bench",
        scopes=[Scope.READ, Scope.WRITE, Scope.ADMIN],
        user=owner,
    )
    return str(organization.pk), secret


# --- the server ------------------------------------------------------------------------------


def _database_url() -> str:
    """The URL of the database Django is connected to now (the scratch one, in the suite)."""
    db = connection.settings_dict
    credentials = quote(str(db.get("USER") or ""), safe="")
    if db.get("PASSWORD"):
        credentials += ":" + quote(str(db["PASSWORD"]), safe="")
    host = quote(str(db.get("HOST") or ""), safe="")  # a socket directory becomes %2F...
    port = f":{db['PORT']}" if db.get("PORT") else ""
    options = {k: v for k, v in (db.get("OPTIONS") or {}).items() if isinstance(v, str | int)}
    query = f"?{urlencode(options)}" if options else ""
    return f"postgres://{credentials}@{host}{port}/{quote(str(db['NAME']), safe='')}{query}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _server_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "neocloud.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--worker-class",
        "gthread",
        "--workers",
        str(SERVER_WORKERS),
        "--threads",
        str(SERVER_THREADS),
        "--keep-alive",
        "10",
        "--graceful-timeout",
        "5",
        "--log-level",
        "warning",
    ]


def _server_env() -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "THROTTLE_RATE_PER_KEY": THROTTLE_RATE,
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
    }


def _answers(port: int) -> bool:
    probe = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        probe.request("GET", "/bench/baseline")
        return probe.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        probe.close()


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


@contextmanager
def _serving(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """gunicorn on ``port``, answering; stopped (and its database sessions gone) on exit."""
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(  # noqa: S603 - a fixed command line, no shell
            _server_command(port),
            cwd=settings.BASE_DIR,
            env=_server_env(),
            stdout=log,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while not _answers(port):
                if server.poll() is not None:
                    raise CommandError(f"gunicorn exited ({server.returncode}):\n{_tail(log)}")
                if time.monotonic() > deadline:
                    raise CommandError(f"gunicorn did not answer in time:\n{_tail(log)}")
                time.sleep(0.1)
            yield server
        finally:
            _stop(server)
            # The scratch database is dropped next: PostgreSQL refuses while sessions remain.
            _wait_for_other_sessions_to_end()


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_for_other_sessions_to_end(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            row = cursor.fetchone()
            if row is None or row[0] == 0:
                return
            time.sleep(0.05)


def _server_peak_rss_mb(master: int) -> float | None:
    """Peak resident memory (VmHWM) of gunicorn's master and workers, summed."""
    pids = [master, *_children(master)]
    total_kib = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total_kib += int(line.split()[1])
    return round(total_kib / 1024, 1)


def _children(parent: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, ...
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            children.append(int(entry.name))
    return children


# --- the client ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    # (client, n) -> request body; n counts the client's requests, warm-up included.
    body: Callable[[int, int], bytes | None] = field(default=lambda client, n: None)


@dataclass
class Tally:
    """What some clients saw: latencies (s) of the requests completed in the window."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None

    def add(self, other: Tally) -> None:
        self.latencies.extend(other.latencies)
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error


@dataclass(frozen=True)
class Window:
    """Absolute ``time.monotonic()`` instants (system-wide on Linux, so shared by processes)."""

    measure_from: float
    until: float


def _client(port: int, workload: Workload, client: int, window: Window, tally: Tally) -> None:
    """One client: its own keep-alive connection, requests back to back until the window ends."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    n = 0
    try:
        while True:
            sent = time.monotonic()
            if sent >= window.until:
                return
            body = workload.body(client, n)
            n += 1
            try:
                conn.request(workload.method, workload.path, body=body, headers=workload.headers)
                response = conn.getresponse()
                content = response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as exc:
                conn.close()  # the next request reconnects
                tally.errors += 1
                tally.first_error = tally.first_error or repr(exc)
                continue
            done = time.monotonic()
            if not 200 <= status < 300:
                tally.errors += 1
                tally.first_error = tally.first_error or f"HTTP {status}: {content[:300]!r}"
            elif window.measure_from <= done <= window.until:
                tally.latencies.append(done - sent)
    finally:
        conn.close()


def _clients(port: int, workload: Workload, clients: range, window: Window) -> Tally:
    tallies = [Tally() for _ in clients]
    threads = [
        threading.Thread(target=_client, args=(port, workload, client, window, tally))
        for client, tally in zip(clients, tallies, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = Tally()
    for tally in tallies:
        total.add(tally)
    return total


def _client_process(
    port: int, workload: Workload, clients: range, window: Window, results: Any
) -> None:
    results.put(_clients(port, workload, clients, window))


def _load(port: int, workload: Workload, warmup: float, duration: float) -> Tally:
    """``CLIENTS`` clients over ``CLIENT_PROCESSES`` processes: warm-up, then the window."""
    connections.close_all()  # forked children must not share the parent's sessions
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    begin = time.monotonic() + 0.2  # let the processes start before anyone is measured
    window = Window(measure_from=begin + warmup, until=begin + warmup + duration)
    per_process = -(-CLIENTS // CLIENT_PROCESSES)
    processes = [
        context.Process(
            target=_client_process,
            args=(port, workload, range(start, min(start + per_process, CLIENTS)), window, results),
        )
        for start in range(0, CLIENTS, per_process)
    ]
    for process in processes:
        process.start()
    total = Tally()
    for _ in processes:  # read before joining: a child blocks until its result is taken
        total.add(results.get(timeout=warmup + duration + REQUEST_TIMEOUT_S + 30))
    for process in processes:
        process.join()
    if any(process.exitcode != 0 for process in processes):
        raise CommandError(f"a client process of the {workload.name} workload failed")
    return total


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _figures(name: str, tally: Tally, duration: float) -> dict[str, Any]:
    latencies = tally.latencies
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else None
    return {
        f"{name}_rps": round(len(latencies) / duration, 1),
        f"{name}_p50_ms": _ms(cuts[49]) if cuts else None,
        f"{name}_p95_ms": _ms(cuts[94]) if cuts else None,
        f"{name}_requests": len(latencies),
    }


def _ratio(ours: float, baseline: float) -> float | None:
    return round(ours / baseline, 3) if baseline else None


def _workloads(organization: str, secret: str) -> list[Workload]:
    auth = {"Authorization": f"Bearer {secret}"}

    def create_body(client: int, n: int) -> bytes:
        tag = f"{client}-{n}"
        return json.dumps(
            {"organization": organization, "name": f"bench {tag}", "slug": f"bench-{tag}"}
        ).encode()

    return [
        Workload("baseline", "GET", "/bench/baseline"),
        Workload("list", "GET", "/api/v1/projects", headers=auth),
        Workload(
            "create",
            "POST",
            "/api/v1/projects",
            headers={**auth, "Content-Type": "application/json"},
            body=create_body,
        ),
    ]


def _gunicorn_version() -> str:
    try:
        import gunicorn
    except ImportError:  # pragma: no cover - the server would not have started either
        return "?"
    return str(gunicorn.__version__)


@suite("api")
def api(scale: float) -> dict[str, Any]:
    """Requests per second and latency of the tenancy API; see the module docstring."""
    if connection.vendor != "postgresql":
        raise CommandError("bench api measures PostgreSQL: set DATABASE_URL")
    duration = max(1.0, 8.0 * scale)
    warmup = max(0.5, 2.0 * scale)
    figures: dict[str, Any] = {}
    errors: dict[str, int] = {}
    first_errors: dict[str, str] = {}
    with scratch_database():
        organization, secret = _seed()
        server_version = connection.cursor().connection.info.server_version
        port = _free_port()
        with _serving(port) as server:
            for workload in _workloads(organization, secret):
                tally = _load(port, workload, warmup, duration)
                figures.update(_figures(workload.name, tally, duration))
                errors[workload.name] = tally.errors
                if tally.first_error:
                    first_errors[workload.name] = tally.first_error
            server_peak = _server_peak_rss_mb(server.pid)

    figures["errors"] = errors
    if first_errors:
        figures["first_errors"] = first_errors
    figures["clients"] = CLIENTS
    figures["client_processes"] = CLIENT_PROCESSES
    figures["duration_s"] = duration
    figures["warmup_s"] = warmup
    figures["seeded_projects"] = SEED_PROJECTS
    figures["cache"] = "redis" if os.environ.get("REDIS_URL") else "locmem"
    figures["server"] = (
        f"gunicorn {_gunicorn_version()} -k gthread --workers {SERVER_WORKERS}"
        f" --threads {SERVER_THREADS}"
    )
    baseline = figures["baseline_rps"]
    return {
        "suite": "api",
        "unit": "requests/s",
        "scale": scale,
        "figures": figures,
        "baseline": "minimal Django JSON view on the same gunicorn",
        "ratios": {
            "list_vs_baseline": _ratio(figures["list_rps"], baseline),
            "create_vs_baseline": _ratio(figures["create_rps"], baseline),
        },
        "list_rps": figures["list_rps"],
        "create_rps": figures["create_rps"],
        "list_p95_ms": figures["list_p95_ms"],
        "create_p95_ms": figures["create_p95_ms"],
        "peak_rss_mb": peak_rss_mb(),
        "server_peak_rss_mb": server_peak,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": server_version,
        },
    }
