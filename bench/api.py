"""``manage.py bench api``: the tenancy API over HTTP, against a minimal Django view.

The suite seeds a scratch PostgreSQL database through the services (an owner; an organization
with ``SEED_PROJECTS`` projects to list; a second one to create projects in, so the listed
page stays the same all run; an owner's API key with every scope in each), starts gunicorn on
it, and drives six workloads with the same client:

* ``baseline``: ``GET /bench/baseline``, a minimal Django JSON view (``bench.urls``)
  served by the same gunicorn through the same middleware: the floor every request pays;
* ``baseline_auth``: ``GET /bench/baseline-auth`` with the Bearer key, a minimal DRF view
  (``bench.urls.BaselineAuth``) that authenticates the key as the API does (its row with its
  user and membership, the hash, the throttles) and makes one query by primary key: the
  floor every authenticated API request pays, and the one the goals are set against;
* ``list``: ``GET /api/v1/projects`` with the Bearer key (key lookup, throttles, tenant scope,
  a cursor page of the seeded projects);
* ``create``: ``POST /api/v1/projects`` with a unique name and slug per request (a service
  call: row lock on the organization, event append, synchronous projection);
* ``workloads_list``: ``GET /api/v1/workloads`` of a project with ``SEED_WORKLOADS`` waiting
  workloads (their reasons and places in line beside the rows);
* ``workloads_create``: ``POST /api/v1/workloads``, a 1-GPU job (every check of a
  submission against the fleet, quota and standing; an append; the row with its place in
  its cluster's line, which grows with every create). No worker runs: its cycles are only
  asked for.

The figures are read as ratios against the baselines of the same run, so the machine
cancels. The workloads run interleaved in ``ROUNDS`` rounds (baseline, baseline_auth, list,
create, workloads_list, workloads_create, baseline, ...), so a slow spell of the machine is
shared by all of them instead of sinking one.

Server. ``gunicorn -k gthread --workers 2 --threads 4`` for all three workloads: one process
per core of the 2-core machine it was tuned on (the GIL allows one core per process), and a
few threads each so a worker keeps its core busy while a request waits on PostgreSQL. Tried
on 2 cores: 2x1, 4x1 and 4x2 moved the baseline and list by about 10%; creates ran 20-35%
faster with fewer threads per worker, likely because a thread holding the organization's row
lock and the append lock then waits less for the GIL behind its siblings. It gets the
settings the command was given, except: the scratch database, ``DEBUG=0``, a per-key throttle of
``THROTTLE_RATE`` (so throttling never refuses a request) and ``bench.settings``
(the project's settings with the baselines' routes). ``REDIS_URL`` is passed through unchanged:
set, the throttle counters live in Redis, as in production; unset, in each worker's memory
(``figures.cache`` says which).

Client. ``CLIENTS`` clients, each on its own persistent HTTP/1.1 connection, issue requests
back to back for a warm-up and then a measured window; a request counts when it completes
inside the window. Connections are spread evenly over the workers (``Balance``): gunicorn
gives a keep-alive connection to whichever worker wins ``accept()``, and 16-0 splits, which
idle a core and halve the figure, were common. The clients are threads in
``CLIENT_PROCESSES`` forked processes: measured on 2 cores, one process served the baseline
about 5% slower (its own GIL), two and four equally. Non-2xx responses and connection
failures count as ``errors``.
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection, connections

from bench.registry import peak_rss_mb, scratch_database, suite
from bench.urls import WORKER_HEADER
from inventory import services as inventory
from neocloud.core.transactions import atomic_with_retry
from scheduler import services as scheduler_services
from scheduler.specs import WorkloadSpec
from tenants.access import Actor
from tenants.models import Project, Scope
from tenants.services import api_key_create, organization_create, project_create, user_register

CLIENTS = 16
CLIENT_PROCESSES = 2
SERVER_WORKERS = 2
SERVER_THREADS = 4
SEED_PROJECTS = 20
SEED_WORKLOADS = 20
SEED_NODES = 2
ROUNDS = 3
BALANCE_ATTEMPTS = 50
THROTTLE_RATE = "1000000/min"
SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 30.0
SETTINGS_MODULE = "bench.settings"
# Issue 16's goals, as ratios to the authenticated baseline.
LIST_GOAL = 0.5
CREATE_GOAL = 0.3


# --- seed ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """Two organizations of one owner: one read (its page never changes), one written to;
    a project of each for workloads, on clusters of their own regions (so the line of work
    the creates make does not lengthen the line the listed page waits in)."""

    read_key: str
    writes_organization: str
    write_key: str
    read_project: str
    writes_project: str
    writes_region: str


def _seed() -> Seed:
    """Created through the services, as an operator's command would."""
    actor = Actor.system_actor("bench")
    owner = atomic_with_retry(
        user_register, actor=actor, email="owner@bench.example", full_name="Bench Owner"
    )
    read = atomic_with_retry(
        organization_create, actor=actor, name="Bench Lab", owner=owner, slug="bench-lab"
    )
    for n in range(SEED_PROJECTS):
        atomic_with_retry(
            project_create, actor=actor, organization=read, name=f"Seeded {n}", slug=f"seeded-{n}"
        )
    writes = atomic_with_retry(
        organization_create, actor=actor, name="Bench Writes", owner=owner, slug="bench-writes"
    )
    keys = [
        atomic_with_retry(
            api_key_create,
            actor=actor,
            organization=organization,
            name="bench",
            scopes=[Scope.READ, Scope.WRITE, Scope.ADMIN],
            user=owner,
        )[1]
        for organization in (read, writes)
    ]
    model = atomic_with_retry(
        inventory.gpu_model_define,
        actor=actor,
        slug="h100",
        name="H100",
        vendor="NVIDIA",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=False,
    )
    for region_slug in ("bench-read", "bench-writes"):
        region = atomic_with_retry(
            inventory.region_define, actor=actor, slug=region_slug, name=region_slug
        )
        cluster = atomic_with_retry(
            inventory.cluster_define, actor=actor, region=region, slug=region_slug, name="B"
        )
        for n in range(SEED_NODES):
            atomic_with_retry(
                inventory.node_register,
                actor=actor,
                cluster=cluster,
                name=f"{region_slug}-{n}",
                gpu_model=model,
                cpu_milli=128_000,
                memory_mib=1_048_576,
                gpus=[inventory.GpuSlot(index=g) for g in range(8)],
            )
    read_project = Project.objects.get(organization=read, slug="seeded-0")
    writes_project = atomic_with_retry(
        project_create, actor=actor, organization=writes, name="Jobs", slug="jobs"
    )
    for n in range(SEED_WORKLOADS):
        spec = WorkloadSpec(name=f"seeded {n}", gpu_models=("h100",), region="bench-read")
        atomic_with_retry(
            scheduler_services.workload_submit, actor=actor, project=read_project, spec=spec
        )
    return Seed(
        read_key=keys[0],
        writes_organization=str(writes.pk),
        write_key=keys[1],
        read_project=str(read_project.pk),
        writes_project=str(writes_project.pk),
        writes_region="bench-writes",
    )


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


def _server_command(port: int, workers: int, threads: int) -> list[str]:
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
        str(workers),
        "--threads",
        str(threads),
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
def _serving(
    port: int,
    *,
    workers: int = SERVER_WORKERS,
    threads: int = SERVER_THREADS,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """gunicorn on ``port``, answering; stopped (and its database sessions gone) on exit.
    ``env`` overrides the server's settings (``_server_env``)."""
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(  # noqa: S603 - a fixed command line, no shell
            _server_command(port, workers, threads),
            cwd=settings.BASE_DIR,
            env={**_server_env(), **(env or {})},
            stdout=log,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while not (_answers(port) and len(_children(server.pid)) >= workers):
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


def _no_body(client: int, n: int) -> bytes | None:
    return None


@dataclass(frozen=True)
class Workload:
    name: str
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    # (client, n) -> request body; n counts the client's requests, warm-up included.
    body: Callable[[int, int], bytes | None] = _no_body


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


class Balance:
    """Spreads the clients' keep-alive connections evenly over gunicorn's workers.

    Which worker serves a connection is decided once, by whichever wins ``accept()``; all 16
    on one worker happens, and leaves the other core idle: the figure then measures luck.
    A client asks the baseline view which worker answered and reconnects until its worker
    has no more than its share. Shared by the client processes (forked).
    """

    def __init__(self, context: Any, workers: list[int]) -> None:
        self.workers = workers
        self.share = -(-CLIENTS // max(1, len(workers)))
        self.counts = context.Array("i", max(1, len(workers)))

    def claim(self, worker: int) -> bool:
        if worker not in self.workers:  # a worker we do not know (restarted): take it
            return True
        index = self.workers.index(worker)
        with self.counts.get_lock():
            if self.counts[index] >= self.share:
                return False
            self.counts[index] += 1
            return True

    def release(self, worker: int) -> None:
        if worker in self.workers:
            with self.counts.get_lock():
                self.counts[self.workers.index(worker)] -= 1


def _connect(port: int, balance: Balance) -> tuple[http.client.HTTPConnection, int]:
    """A connection to a worker that has room (after ``BALANCE_ATTEMPTS``: any worker)."""
    for _ in range(BALANCE_ATTEMPTS):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        conn.request("GET", "/bench/baseline")
        response = conn.getresponse()
        response.read()
        worker = int(response.getheader(WORKER_HEADER) or 0)
        if balance.claim(worker):
            return conn, worker
        conn.close()
    return http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S), 0


def _client(
    port: int, workload: Workload, client: int, window: Window, balance: Balance, tally: Tally
) -> None:
    """One client: its own keep-alive connection, requests back to back until the window
    ends. A failed request is an error and the client reconnects; failing to reconnect ends
    the client (also an error)."""
    conn: http.client.HTTPConnection | None = None
    worker = 0
    n = 0
    try:
        while (sent := time.monotonic()) < window.until:
            if conn is None:
                conn, worker = _connect(port, balance)
                sent = time.monotonic()
            body = workload.body(client, n)
            n += 1
            try:
                conn.request(workload.method, workload.path, body=body, headers=workload.headers)
                response = conn.getresponse()
                content = response.read()
            except (OSError, http.client.HTTPException) as exc:
                tally.errors += 1
                tally.first_error = tally.first_error or repr(exc)
                conn.close()
                balance.release(worker)
                conn, worker = None, 0
                continue
            done = time.monotonic()
            if not 200 <= response.status < 300:
                tally.errors += 1
                tally.first_error = (
                    tally.first_error or f"HTTP {response.status}: {content[:300]!r}"
                )
            elif window.measure_from <= done <= window.until:
                tally.latencies.append(done - sent)
    except (OSError, http.client.HTTPException) as exc:
        tally.errors += 1
        tally.first_error = tally.first_error or f"reconnecting: {exc!r}"
    finally:
        if conn is not None:
            conn.close()
            balance.release(worker)


def _clients(
    port: int, workload: Workload, clients: range, window: Window, balance: Balance
) -> Tally:
    tallies = [Tally() for _ in clients]
    threads = [
        threading.Thread(target=_client, args=(port, workload, client, window, balance, tally))
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
    port: int, workload: Workload, clients: range, window: Window, balance: Balance, results: Any
) -> None:
    results.put(_clients(port, workload, clients, window, balance))


def _load(
    port: int,
    workers: list[int],
    workload: Workload,
    first_client: int,
    warmup: float,
    duration: float,
) -> Tally:
    """``CLIENTS`` clients over ``CLIENT_PROCESSES`` processes: warm-up, then the window.

    Clients are numbered from ``first_client``, so every round's bodies differ.
    """
    connections.close_all()  # forked children must not share the parent's sessions
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    balance = Balance(context, workers)
    begin = time.monotonic() + 0.2  # let the processes start before anyone is measured
    window = Window(measure_from=begin + warmup, until=begin + warmup + duration)
    per_process = -(-CLIENTS // CLIENT_PROCESSES)
    processes = [
        context.Process(
            target=_client_process,
            args=(
                port,
                workload,
                range(first_client + start, first_client + min(start + per_process, CLIENTS)),
                window,
                balance,
                results,
            ),
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


def _workloads(seed: Seed) -> list[Workload]:
    def create_body(client: int, n: int) -> bytes:
        tag = f"{client}-{n}"
        return json.dumps(
            {
                "organization": seed.writes_organization,
                "name": f"bench {tag}",
                "slug": f"bench-{tag}",
            }
        ).encode()

    def submit_body(client: int, n: int) -> bytes:
        return json.dumps(
            {
                "project": seed.writes_project,
                "name": f"bench {client}-{n}",
                "gpu_models": ["h100"],
                "region": seed.writes_region,
            }
        ).encode()

    return [
        Workload("baseline", "GET", "/bench/baseline"),
        Workload("baseline_auth", "GET", "/bench/baseline-auth", headers=_bearer(seed.read_key)),
        Workload("list", "GET", "/api/v1/projects", headers=_bearer(seed.read_key)),
        Workload(
            "create",
            "POST",
            "/api/v1/projects",
            headers={**_bearer(seed.write_key), "Content-Type": "application/json"},
            body=create_body,
        ),
        Workload(
            "workloads_list",
            "GET",
            f"/api/v1/workloads?project={seed.read_project}",
            headers=_bearer(seed.read_key),
        ),
        Workload(
            "workloads_create",
            "POST",
            "/api/v1/workloads",
            headers={**_bearer(seed.write_key), "Content-Type": "application/json"},
            body=submit_body,
        ),
    ]


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


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
    duration = max(1.0, 8.0 * scale)  # measured, per workload, over all rounds
    warmup = max(0.5, 2.0 * scale)  # before the first round; later rounds only reconnect
    rewarm = min(warmup, 0.5)
    tallies: dict[str, Tally] = {}
    with scratch_database():
        seed = _seed()
        server_version = connection.cursor().connection.info.server_version
        port = _free_port()
        with _serving(port) as server:
            workers = _children(server.pid)
            # Rounds interleave the workloads, so a slow spell of the machine (another
            # process, a noisy neighbour) is shared by all three instead of sinking one.
            for round_ in range(ROUNDS):
                for workload in _workloads(seed):
                    tally = _load(
                        port,
                        workers,
                        workload,
                        first_client=round_ * CLIENTS,
                        warmup=warmup if round_ == 0 else rewarm,
                        duration=duration / ROUNDS,
                    )
                    tallies.setdefault(workload.name, Tally()).add(tally)
            server_peak = _server_peak_rss_mb(server.pid)

    figures: dict[str, Any] = {}
    for name, tally in tallies.items():
        figures.update(_figures(name, tally, duration))
    figures["errors"] = {name: tally.errors for name, tally in tallies.items()}
    first_errors = {name: t.first_error for name, t in tallies.items() if t.first_error}
    if first_errors:
        figures["first_errors"] = first_errors
    figures["clients"] = CLIENTS
    figures["client_processes"] = CLIENT_PROCESSES
    figures["rounds"] = ROUNDS
    figures["duration_s"] = duration
    figures["warmup_s"] = warmup
    figures["seeded_projects"] = SEED_PROJECTS
    figures["seeded_workloads"] = SEED_WORKLOADS
    figures["cache"] = "redis" if os.environ.get("REDIS_URL") else "locmem"
    figures["server"] = (
        f"gunicorn {_gunicorn_version()} -k gthread --workers {SERVER_WORKERS}"
        f" --threads {SERVER_THREADS}"
    )
    baseline, authenticated = figures["baseline_rps"], figures["baseline_auth_rps"]
    ratios = {
        "list_vs_baseline": _ratio(figures["list_rps"], baseline),
        "create_vs_baseline": _ratio(figures["create_rps"], baseline),
        "list_vs_baseline_auth": _ratio(figures["list_rps"], authenticated),
        "create_vs_baseline_auth": _ratio(figures["create_rps"], authenticated),
        "workloads_list_vs_baseline_auth": _ratio(figures["workloads_list_rps"], authenticated),
        "workloads_create_vs_baseline_auth": _ratio(figures["workloads_create_rps"], authenticated),
    }
    return {
        "suite": "api",
        "unit": "requests/s",
        "scale": scale,
        "figures": figures,
        "baseline": "minimal Django JSON view on the same gunicorn",
        "baseline_auth": "minimal API view: the key authenticated as the API does, one query"
        " by primary key",
        "ratios": ratios,
        "goals": {
            "list_vs_baseline_auth": LIST_GOAL,
            "create_vs_baseline_auth": CREATE_GOAL,
            "met": (ratios["list_vs_baseline_auth"] or 0) >= LIST_GOAL
            and (ratios["create_vs_baseline_auth"] or 0) >= CREATE_GOAL,
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
