"""``manage.py bench longpoll``: heartbeats while a thousand long polls wait.

One web process, ``uvicorn neocloud.asgi:application`` (the application production serves,
``--workers 1``), on a scratch PostgreSQL database seeded with ``AGENTS`` agent nodes (not
provisioned: their work never starts) and a customer whose one job waits for GPUs, so its
output may still come and a follow of it waits its whole ``wait``. The clients are coroutines
of this process on ``httpx``:

- **idle**: ``HEARTBEATS`` heartbeats (``POST nodes/{id}/heartbeat``, the agent's, which
  marks the node alive; one at a time, round the nodes), nothing else open: the baseline;
- **loaded**: ``FOLLOWS`` follows of the job's output (``logs?follow=true&wait=30``, asked
  again as each answers) and one assignments poll per node (``since`` its version,
  ``wait=60``, likewise), arriving one after another over ``RAMP_S`` (as real clients do, not
  all in one instant), while heartbeats are sent one at a time from the first arrival until
  ``STEADY_S`` after the last (long enough for every follow to end and come back once).

Figures: heartbeat latency p50/p99 of the idle phase, of the whole loaded run (the ramp-up
included) and of its steady state (from ``SETTLE_S`` after the last arrival), the ratios to
idle, and whether each loaded p99 meets ``GOAL_P99_MS``; the database sessions of the server
at their peak during the loaded phase (``pg_stat_activity``: the waiters must not hold one
each), the server's peak threads (nor a thread each) and memory (VmHWM), and this process's
peak memory. The caps of follows per key and organization are lifted for the run (every
follow is one customer's): they are not measured. Below scale 1 the ramp and the steady
state shrink with the scale (to no less than ``SETTLE_S``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
from django.conf import settings
from django.core.management.base import CommandError

from bench.api import (
    _answers,
    _free_port,
    _server_env,
    _stop,
    _tail,
    _wait_for_other_sessions_to_end,
)
from bench.e2e import _percentiles, h100_cluster
from bench.registry import peak_rss_mb, scratch_database, suite
from events.wakeup import psycopg_params
from inventory import services as inventory
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.models import Scope
from tenants.services import (
    api_key_create,
    organization_create,
    project_create,
    quota_set,
    user_register,
)

FOLLOWS = 1000  # at scale 1
AGENTS = 200  # at scale 1
HEARTBEATS = 200
FOLLOW_WAIT_S = 30
POLL_WAIT_S = 60
RAMP_S = 10.0  # the waiters arrive evenly over this, at scale 1
SETTLE_S = 5.0  # after the last arrival, before the steady state begins
STEADY_S = 45.0  # of steady state at scale 1: a follow's wait ends (24-30 s) and comes back
SAMPLE_S = 0.5
GOAL_P99_MS = 1000.0
START_TIMEOUT_S = 60.0
ACTOR = Actor.system_actor("bench")


def _seed(agents: int) -> tuple[str, str, dict[str, str]]:
    """The customer's key and project, and the nodes (id: token)."""
    cluster, model = h100_cluster()
    nodes = {}
    for n in range(agents):
        node, token = atomic_with_retry(
            inventory.node_register,
            actor=ACTOR,
            cluster=cluster,
            name=f"agent-{n}",
            gpu_model=model,
            cpu_milli=32_000,
            memory_mib=262_144,
            gpus=[inventory.GpuSlot(index=0)],
            driver="agent",
        )
        if token is None:
            raise CommandError(f"node {node.name} was registered before")
        nodes[str(node.pk)] = token
    owner = atomic_with_retry(user_register, actor=ACTOR, email="owner@bench.example")
    organization = atomic_with_retry(
        organization_create, actor=ACTOR, name="Bench", owner=owner, slug="bench"
    )
    _, key = atomic_with_retry(
        api_key_create,
        actor=ACTOR,
        organization=organization,
        name="bench",
        scopes=[Scope.READ, Scope.WRITE],
        user=owner,
    )
    project = atomic_with_retry(project_create, actor=ACTOR, organization=organization, name="runs")
    atomic_with_retry(
        quota_set,
        actor=ACTOR,
        organization=organization,
        project=project,
        gpu_model="h100",
        max_gpus=1,
    )
    return key, str(project.pk), nodes


def _proc_field(pid: int, field: str) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


class _Sampler:
    """The server's database sessions and threads, every ``SAMPLE_S``, at their peaks."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sessions = 0
        self.threads = 0

    def sample(self, database: psycopg.Connection[Any]) -> None:
        row = database.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        self.sessions = max(self.sessions, int(row[0]) if row else 0)
        self.threads = max(self.threads, _proc_field(self.pid, "Threads"))

    async def run(self, stop: asyncio.Event) -> None:
        database = await asyncio.to_thread(psycopg.connect, **psycopg_params(), autocommit=True)
        try:
            while not stop.is_set():
                await asyncio.to_thread(self.sample, database)
                await asyncio.sleep(SAMPLE_S)
        finally:
            database.close()


async def _heartbeat(client: httpx.AsyncClient, node: str, token: str) -> float:
    """One heartbeat's latency in ms."""
    began = time.perf_counter()
    response = await client.post(
        f"/api/v1/nodes/{node}/heartbeat", json={}, headers={"Authorization": f"Node {token}"}
    )
    if response.status_code != 200:
        raise CommandError(f"heartbeat: HTTP {response.status_code} {response.text[:300]}")
    return (time.perf_counter() - began) * 1000


async def _heartbeats(client: httpx.AsyncClient, nodes: dict[str, str]) -> list[float]:
    pairs = list(nodes.items())
    return [await _heartbeat(client, *pairs[n % len(pairs)]) for n in range(HEARTBEATS)]


def _heartbeats_until(url: str, nodes: dict[str, str], end: float) -> list[tuple[float, float]]:
    """Heartbeats one at a time, round the nodes, until ``end`` (``time.monotonic``, the same
    in every process): each one's start and latency in ms. Run in a process of its own, as an
    agent is: in this one they would wait behind the waiters' thousand coroutines."""
    pairs, measured = list(nodes.items()), list[tuple[float, float]]()
    with httpx.Client(base_url=url, timeout=POLL_WAIT_S + 60) as client:
        while (began := time.monotonic()) < end:
            node, token = pairs[len(measured) % len(pairs)]
            response = client.post(
                f"/api/v1/nodes/{node}/heartbeat",
                json={},
                headers={"Authorization": f"Node {token}"},
            )
            if response.status_code != 200:
                raise CommandError(f"heartbeat: HTTP {response.status_code} {response.text[:300]}")
            measured.append((began, (time.monotonic() - began) * 1000))
    return measured


def _cpu_s(pid: int) -> float:
    """The process's CPU time (user + system) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _arriving(delay: float, waiter: Any) -> None:
    await asyncio.sleep(delay)
    await waiter


async def _follow(client: httpx.AsyncClient, path: str, key: str, counts: dict[str, int]) -> None:
    while True:
        response = await client.get(
            path,
            params={"follow": "true", "wait": FOLLOW_WAIT_S},
            headers={"Authorization": f"Bearer {key}"},
        )
        counts["follows_answered" if response.status_code == 200 else "errors"] += 1


async def _poll(client: httpx.AsyncClient, node: str, token: str, counts: dict[str, int]) -> None:
    headers = {"Authorization": f"Node {token}"}
    path = f"/api/v1/nodes/{node}/assignments"
    version = (await client.get(path, headers=headers)).json()["version"]
    while True:
        response = await client.get(
            path, params={"since": version, "wait": POLL_WAIT_S}, headers=headers
        )
        counts["polls_answered" if response.status_code == 200 else "errors"] += 1


async def _run(
    port: int, pid: int, seed: tuple[str, str, dict[str, str]], follows: int, scale: float
) -> dict[str, Any]:
    key, project, nodes = seed
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(POLL_WAIT_S + 60)
    ramp_s = RAMP_S * min(scale, 1.0)
    steady_s = max(SETTLE_S, STEADY_S * min(scale, 1.0))
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=timeout
    ) as client:
        job = await client.post(
            "/api/v1/workloads",
            json={
                "project": project,
                "name": "waits",  # for nodes that are never ready: it may still write output
                "gpu_models": ["h100"],
                "gpus_per_node": 1,
                "command": ["true"],
            },
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "bench-longpoll"},
        )
        if job.status_code != 201:
            raise CommandError(f"submitting: HTTP {job.status_code} {job.text[:300]}")
        logs = f"/api/v1/workloads/{job.json()['id']}/logs"
        idle = await _heartbeats(client, nodes)

        counts = {"follows_answered": 0, "polls_answered": 0, "errors": 0}
        sampler, stop = _Sampler(pid), asyncio.Event()
        sampling = asyncio.create_task(sampler.run(stop))
        # Polls and follows interleaved, evenly over the ramp.
        arrivals = [_follow(client, logs, key, counts) for _ in range(follows)]
        every = max(1, follows // max(1, len(nodes)))
        for n, (node, token) in enumerate(nodes.items()):
            arrivals.insert(n * (every + 1), _poll(client, node, token, counts))
        began, cpu_began = time.monotonic(), _cpu_s(pid)
        waiters = [
            asyncio.create_task(_arriving(n * ramp_s / len(arrivals), arrival))
            for n, arrival in enumerate(arrivals)
        ]
        end = began + ramp_s + SETTLE_S + steady_s
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as agent:
            measured = await asyncio.get_running_loop().run_in_executor(
                agent, _heartbeats_until, str(client.base_url), nodes, end
            )
        loaded_s, server_cpu_s = time.monotonic() - began, _cpu_s(pid) - cpu_began
        stop.set()
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, sampling, return_exceptions=True)
    steady_from = began + ramp_s + SETTLE_S
    idle_ms = _percentiles(idle)
    loaded = {
        "loaded_whole_run": _percentiles([ms for _, ms in measured]),
        "loaded_steady": _percentiles([ms for at, ms in measured if at >= steady_from]),
    }
    return {
        "heartbeat_ms": {"idle": idle_ms, **loaded},
        "heartbeats_measured": {
            "loaded_whole_run": len(measured),
            "loaded_steady": sum(1 for at, _ in measured if at >= steady_from),
        },
        "seconds": {"ramp": ramp_s, "settle": SETTLE_S, "steady": steady_s},
        "goal_p99_ms": GOAL_P99_MS,
        "goal_met": {phase: ms["p99"] <= GOAL_P99_MS for phase, ms in loaded.items()},
        "ratios": {
            f"heartbeat_{p}_{phase}_vs_idle": round(ms[p] / max(idle_ms[p], 0.1), 2)
            for phase, ms in loaded.items()
            for p in ("p50", "p99")
        },
        # What bounds the latency: the server's CPU (one process: at most one core's worth of
        # Python at a time) over the loaded phase, and the requests it served meanwhile.
        "loaded_s": round(loaded_s, 1),
        "server_cpu_s": round(server_cpu_s, 1),
        "requests_sent": len(measured)
        + len(arrivals)
        + counts["follows_answered"]
        + counts["polls_answered"],
        "db_sessions_peak": sampler.sessions,
        "server_threads_peak": sampler.threads,
        **counts,
    }


@suite("longpoll")
def longpoll(scale: float) -> dict[str, Any]:
    follows, agents = max(1, round(FOLLOWS * scale)), max(1, round(AGENTS * scale))
    with scratch_database():
        seed = _seed(agents)
        port = _free_port()
        env = {
            **_server_env(),
            "LOG_FOLLOWS_PER_KEY": str(follows + 1),
            "LOG_FOLLOWS_PER_ORGANIZATION": str(follows + 1),
        }
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "neocloud.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--no-access-log",
            "--log-level",
            "warning",
        ]
        with tempfile.TemporaryFile() as log:
            server = subprocess.Popen(  # noqa: S603 - a fixed command line, no shell
                command, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=log
            )
            try:
                deadline = time.monotonic() + START_TIMEOUT_S
                while not _answers(port):
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise CommandError(f"uvicorn did not answer:\n{_tail(log)}")
                    time.sleep(0.1)
                figures = asyncio.run(_run(port, server.pid, seed, follows, scale))
                figures["server_peak_rss_mb"] = round(_proc_field(server.pid, "VmHWM") / 1024, 1)
            finally:
                _stop(server)
                _wait_for_other_sessions_to_end()
    return {
        "suite": "longpoll",
        "follows": follows,
        "agents": agents,
        **figures,
        "peak_rss_mb": peak_rss_mb(),
    }
