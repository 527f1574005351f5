"""``bench execution``: jobs through real node agents, from grant to start, and a run's output
from the agent into the database.

Every process is real: gunicorn (one worker process, ``SERVER_THREADS`` threads, so the
agents' long polls do not hold each other up) serves the control plane on a scratch
PostgreSQL database, its tasks in process (no ``REDIS_URL`` in its environment: a cycle runs
right after the commit that asked for it, in the one process that holds the lease), and
``NODES`` ``python -m agent.cli --fake-gpus`` agents run the jobs, on nodes registered with
the ``agent`` driver and provisioned once their agents reported in. The suite needs
PostgreSQL, not Redis.

- **Dispatch**: ``JOBS`` jobs of 1 GPU running ``true``, submitted back to back through
  ``POST /api/v1/workloads`` (more jobs than GPUs: later ones are granted as earlier ones
  end). Per job, grant (``Allocation.granted_at``) to the agent's ``started`` report
  (``Assignment.started_at``, the agent's clock on the same host), and submission to
  ``succeeded``. Long polls (``--poll-wait-s 20``, the default) against the baseline: the
  same agents with ``--poll-wait-s 0``, which poll back to back with no pause (the poll loop
  only sleeps when a start waits for GPUs). The long-poll phase runs first, after one
  warm-up job; each phase has agents of its own.
- **Log ingestion**: one job writing ``LOG_BYTES`` to stdout as fast as ``head | tr`` can,
  from the run's start to the commit of its ``exited`` report (which the agent sends only
  once the whole output is acknowledged), through the agent's chunks of 64 KiB, requests of
  1 MiB, at most 8 a watcher tick of 0.2 s. The baseline: the same bytes, as the same 16
  chunks a call, given to ``execution.services.logs_append`` in this process (no HTTP, no
  base64, no agent), each call its own transaction.

Beside them: the CPU seconds gunicorn and the agents used in each phase (what back-to-back
polls cost), the agents' and gunicorn's peak memory (VmHWM), and this process's.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from bench.api import _children, _free_port, _server_peak_rss_mb, _serving
from bench.e2e import _eager, _percentiles, h100_cluster
from bench.registry import peak_rss_mb, scratch_database, suite
from events import store
from execution import events as execution_events
from execution import services as execution
from execution.models import Assignment, AssignmentOutput
from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Node
from neocloud.core.transactions import atomic_with_retry
from scheduler import scheduling
from scheduler.models import FINAL_STATUSES, Allocation, Workload, WorkloadStatus
from tenants.access import Actor
from tenants.models import Scope
from tenants.services import (
    api_key_create,
    organization_create,
    project_create,
    quota_set,
    user_register,
)

NODES = 4
GPUS_PER_NODE = 4
JOBS = 40  # at scale 1
LOG_BYTES = 32 << 20  # at scale 1
LONG_POLL_S = 20
SERVER_THREADS = 16
CHUNK_BYTES = 64 << 10  # the protocol's chunk, and the agent's
REQUEST_BYTES = 1 << 20  # the protocol's request, and the agent's
AGENT_LOG_MAX_BYTES = 64 << 20  # the agent's default spool cap
START_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 300.0
AGENT_STOP_TIMEOUT_S = 15.0
ACTOR = Actor.system_actor("bench")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Seed:
    key: str
    project: str
    nodes: dict[uuid.UUID, str]  # node id: its agent's token


def _seed() -> Seed:
    """The agent nodes (registered, not provisioned: that needs their agents' heartbeats), a
    customer with a key and a project whose quota is the fleet."""
    cluster, model = h100_cluster()
    nodes: dict[uuid.UUID, str] = {}
    for n in range(NODES):
        node, token = atomic_with_retry(
            inventory.node_register,
            actor=ACTOR,
            cluster=cluster,
            name=f"agent-{n}",
            gpu_model=model,
            cpu_milli=32_000,
            memory_mib=262_144,
            gpus=[inventory.GpuSlot(index=g) for g in range(GPUS_PER_NODE)],
            driver="agent",
        )
        if token is None:  # only a node registered before has none: not in a scratch database
            raise CommandError(f"node {node.name} was registered before")
        nodes[node.pk] = token
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
        max_gpus=NODES * GPUS_PER_NODE,
    )
    return Seed(key=key, project=str(project.pk), nodes=nodes)


# --- processes ---------------------------------------------------------------------------------


def _proc_status_kib(pid: int, field: str) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds these processes used so far (their own, not children's)."""
    ticks = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # from the state on: utime, stime are 12th, 13th
        ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


@dataclass
class Agents:
    processes: list[subprocess.Popen[bytes]]
    log: Path

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def peak_rss_mb(self) -> float:
        """The largest VmHWM of the agents (each is one process; runs are their own)."""
        return round(max(_proc_status_kib(pid, "VmHWM") for pid in self.pids) / 1024, 1)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


@contextmanager
def _agents(seed: Seed, url: str, poll_wait_s: int, directory: Path) -> Iterator[Agents]:
    """One agent per node with fake GPUs and a state directory of its own, answering (each
    sent a heartbeat after it started); SIGTERM on exit (their runs have ended by then)."""
    directory.mkdir(parents=True)
    log = directory / "agents.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE"))}
    env["PYTHONPATH"] = str(settings.BASE_DIR)
    launched = timezone.now()
    processes: list[subprocess.Popen[bytes]] = []
    with log.open("ab") as output:
        for node_id, token in seed.nodes.items():
            token_file = directory / f"{node_id}.token"
            token_file.write_text(token)
            token_file.chmod(0o600)
            command = [
                sys.executable,
                "-m",
                "agent.cli",
                "--url",
                url,
                "--node-id",
                str(node_id),
                "--token-file",
                str(token_file),
                "--state-dir",
                str(directory / f"{node_id}.state"),
                "--fake-gpus",
                str(GPUS_PER_NODE),
                "--gpu-model",
                "h100",
                "--poll-wait-s",
                str(poll_wait_s),
                "--log-max-bytes",
                str(AGENT_LOG_MAX_BYTES),
                "--log-level",
                "WARNING",
            ]
            processes.append(
                subprocess.Popen(  # noqa: S603 - a fixed command line, no shell
                    command,
                    cwd=settings.BASE_DIR,
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    agents = Agents(processes, log)
    try:
        _wait(lambda: _heard_since(seed, launched), "the agents' first heartbeats", agents)
        yield agents
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(AGENT_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _heard_since(seed: Seed, since: Any) -> bool:
    heard = Node.objects.filter(pk__in=seed.nodes, last_heartbeat_at__gt=since).count()
    return heard == len(seed.nodes)


def _wait(
    done: Callable[[], bool], what: str, agents: Agents, timeout: float = START_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise CommandError(f"timed out waiting for {what}; agents said:\n{agents.tail()}")
        time.sleep(0.05)


def _provision(seed: Seed, agents: Agents) -> None:
    """The nodes through the agent driver's provisioning (in this process), then ready for
    the agents: each heard from since (their heartbeat's answer says they may take work)."""
    with _eager():
        for node in Node.objects.filter(pk__in=seed.nodes):
            atomic_with_retry(inventory.node_provision, actor=ACTOR, node=node)
    ready = Node.objects.filter(pk__in=seed.nodes, state=NodeState.READY).count()
    if ready != len(seed.nodes):
        raise CommandError(f"{len(seed.nodes) - ready} agent node(s) did not become ready")
    # Provisioning ran a cycle here, which took the lease: gunicorn's now.
    scheduling.leases_release(scheduling.holder_name())
    since = timezone.now()
    _wait(lambda: _heard_since(seed, since), "heartbeats of the ready nodes", agents)


# --- jobs --------------------------------------------------------------------------------------


def _submit(conn: http.client.HTTPConnection, seed: Seed, name: str, command: list[str]) -> str:
    body = json.dumps(
        {
            "project": seed.project,
            "name": name,
            "gpu_models": ["h100"],
            "gpus_per_node": 1,
            "command": command,
            "retry_limit": 0,
        }
    )
    conn.request(
        "POST",
        "/api/v1/workloads",
        body=body,
        headers={
            "Authorization": f"Bearer {seed.key}",
            "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4()),
        },
    )
    response = conn.getresponse()
    payload = response.read()
    if response.status != 201:
        raise CommandError(f"submitting {name}: HTTP {response.status} {payload[:300]!r}")
    return str(json.loads(payload)["id"])


def _wait_final(ids: list[str], agents: Agents) -> None:
    _wait(
        lambda: Workload.objects.filter(pk__in=ids, status__in=FINAL_STATUSES).count() == len(ids),
        f"{len(ids)} workload(s) to end",
        agents,
        timeout=FINISH_TIMEOUT_S,
    )


def _dispatch(seed: Seed, port: int, agents: Agents, jobs: int, tag: str) -> dict[str, Any]:
    """Submit the jobs back to back, wait until all ended; latencies from the rows."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    submitted: dict[str, float] = {}
    for n in range(jobs):
        sent = time.time()
        submitted[_submit(conn, seed, f"{tag}-{n}", ["true"])] = sent
    conn.close()
    _wait_final(list(submitted), agents)
    granted = {
        str(a.workload_id): a.granted_at.timestamp()
        for a in Allocation.objects.filter(workload_id__in=submitted).order_by("-granted_at")
    }  # the first grant of each (there is one: no retries)
    started = {
        str(a.workload_id): a.started_at.timestamp()
        for a in Assignment.objects.filter(workload_id__in=submitted)
        if a.started_at is not None
    }
    rows = Workload.objects.filter(pk__in=submitted)
    succeeded = {str(w.pk): w.finished_at for w in rows if w.status == WorkloadStatus.SUCCEEDED}
    dispatch = [(started[w] - granted[w]) * 1000 for w in started if w in granted]
    whole = [(at.timestamp() - submitted[w]) * 1000 for w, at in succeeded.items() if at]
    return {
        "jobs": jobs,
        "succeeded": len(succeeded),
        "dispatch_ms": _percentiles(dispatch),
        "submit_to_succeeded_ms": _percentiles(whole),
    }


def _phase_cpu(server: int, agents: Agents, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run``'s figures, and the CPU seconds gunicorn and the agents spent meanwhile."""
    server_pids = [server, *_children(server)]
    server_before, agents_before = _cpu_s(server_pids), _cpu_s(agents.pids)
    figures = run()
    figures["server_cpu_s"] = round(_cpu_s(server_pids) - server_before, 2)
    figures["agents_cpu_s"] = round(_cpu_s(agents.pids) - agents_before, 2)
    return figures


def _log_run(seed: Seed, port: int, agents: Agents, size: int) -> dict[str, Any]:
    """One run writing ``size`` bytes; its start to the commit of its ``exited`` report."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    command = ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' a"]
    workload = _submit(conn, seed, "output", command)
    conn.close()
    _wait_final([workload], agents)
    assignment = Assignment.objects.get(workload_id=workload)
    exited = [
        e.recorded_at
        for e in store.read_stream(execution_events.ASSIGNMENT_STREAM, str(assignment.pk))
        if e.data.get("kind") == "exited"
    ]
    output = AssignmentOutput.objects.get(pk=assignment.pk)
    began = assignment.started_at
    seconds = (exited[0] - began).total_seconds() if exited and began else 0.0
    return {
        "status": Workload.objects.get(pk=workload).status,
        "bytes_written": size,
        "bytes_stored": output.stored_bytes,
        "truncated_bytes": output.truncated_bytes,
        "dropped_bytes": output.dropped_bytes,
        "seconds": round(seconds, 3),
        "mib_per_s": round(size / (1 << 20) / seconds, 1) if seconds > 0 else None,
    }


def _logs_direct(assignment: Assignment, size: int) -> dict[str, Any]:
    """The same bytes straight into ``logs_append``, a request's 16 chunks a transaction, on
    an assignment that wrote nothing (a dispatch job's: a workload of its own, under its cap).
    One 1 MiB block is reused: memory does not grow with ``size``."""
    node = Node.objects.get(pk=assignment.node_id)
    block = b"a" * REQUEST_BYTES
    began = time.perf_counter()
    for start in range(0, size, REQUEST_BYTES):
        length = min(REQUEST_BYTES, size - start)
        chunks = [
            execution.Chunk(
                assignment_id=assignment.pk,
                offset=start + at,
                data=block[at : min(at + CHUNK_BYTES, length)],
            )
            for at in range(0, length, CHUNK_BYTES)
        ]
        atomic_with_retry(execution.logs_append, node=node, chunks=chunks, dropped=[])
    seconds = time.perf_counter() - began
    stored = AssignmentOutput.objects.get(pk=assignment.pk).stored_bytes
    return {
        "bytes_stored": stored,
        "seconds": round(seconds, 3),
        "mib_per_s": round(size / (1 << 20) / seconds, 1) if seconds > 0 else None,
    }


def _ratio(ours: float | None, baseline: float | None) -> float | None:
    return round(ours / baseline, 3) if ours and baseline else None


@suite("execution")
def bench_execution(scale: float) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        raise CommandError("bench execution serves PostgreSQL to gunicorn: set DATABASE_URL")
    jobs = max(4, round(JOBS * scale))
    log_bytes = max(REQUEST_BYTES, round(LOG_BYTES * scale))
    cap = log_bytes + REQUEST_BYTES  # the workload's cap above the run's output: all stored
    server_env = {"REDIS_URL": "", "LOG_MAX_BYTES_PER_WORKLOAD": str(cap)}
    with scratch_database(), tempfile.TemporaryDirectory(prefix="bench-execution-") as scratch:
        Path(scratch).chmod(0o711)  # runs (users of their own) reach their work below it
        seed = _seed()
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with _serving(port, workers=1, threads=SERVER_THREADS, env=server_env) as server:
            with _agents(seed, url, LONG_POLL_S, Path(scratch) / "long") as agents:
                _provision(seed, agents)
                _dispatch(seed, port, agents, 1, "warm-up")
                long_poll = _phase_cpu(
                    server.pid, agents, lambda: _dispatch(seed, port, agents, jobs, "long")
                )
                logs = _log_run(seed, port, agents, log_bytes)
                long_poll["agent_peak_rss_mb"] = agents.peak_rss_mb()
            with _agents(seed, url, 0, Path(scratch) / "short") as agents:
                short_poll = _phase_cpu(
                    server.pid, agents, lambda: _dispatch(seed, port, agents, jobs, "short")
                )
                short_poll["agent_peak_rss_mb"] = agents.peak_rss_mb()
            server_peak = _server_peak_rss_mb(server.pid)
        quiet = Workload.objects.get(name="short-0")  # wrote nothing: its output is empty
        target = Assignment.objects.get(workload_id=quiet.pk)
        with override_settings(LOG_MAX_BYTES_PER_WORKLOAD=cap):
            direct = _logs_direct(target, log_bytes)
    return {
        "suite": "execution",
        "scale": scale,
        "nodes": NODES,
        "gpus_per_node": GPUS_PER_NODE,
        "server": f"gunicorn -k gthread --workers 1 --threads {SERVER_THREADS}, tasks in process",
        "dispatch_ms_p50": long_poll["dispatch_ms"]["p50"],
        "dispatch_ms_p99": long_poll["dispatch_ms"]["p99"],
        "long_poll": {"poll_wait_s": LONG_POLL_S, **long_poll},
        "baseline": "the same agents polling back to back (--poll-wait-s 0, no pause)",
        "short_poll": {"poll_wait_s": 0, **short_poll},
        "log_ingest_mib_s": logs["mib_per_s"],
        "log_ingest": logs,
        "log_baseline": "the same bytes, 16 x 64 KiB chunks a call, to logs_append in process",
        "log_direct": direct,
        "ratios": {
            "dispatch_p50_long_vs_short": _ratio(
                long_poll["dispatch_ms"]["p50"], short_poll["dispatch_ms"]["p50"]
            ),
            "dispatch_p99_long_vs_short": _ratio(
                long_poll["dispatch_ms"]["p99"], short_poll["dispatch_ms"]["p99"]
            ),
            "server_cpu_long_vs_short": _ratio(
                long_poll["server_cpu_s"], short_poll["server_cpu_s"]
            ),
            "log_ingest_vs_direct": _ratio(logs["mib_per_s"], direct["mib_per_s"]),
        },
        "agent_peak_rss_mb": max(long_poll["agent_peak_rss_mb"], short_poll["agent_peak_rss_mb"]),
        "server_peak_rss_mb": server_peak,
        "peak_rss_mb": peak_rss_mb(),
        "machine": {"cpus": os.cpu_count()},
    }
