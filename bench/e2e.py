"""``bench e2e``: workloads through the API, scheduled and run by real Celery workers on
PostgreSQL and Redis with the simulated driver, in the configuration of Kueue's scheduler
performance test.

Five cohorts of six queues (one project each); every queue has a nominal quota of 20 GPUs and
may borrow 100 more. Each queue gets 500 workloads: 350 small (1 GPU, 200 ms, priority 50),
100 medium (5 GPUs, 500 ms, priority 100) and 50 large (20 GPUs as 5 nodes x 4, 1 s,
priority 200): 15,000 in all, on 600 GPUs (75 nodes x 8), the sum of the quotas. ``scale``
shrinks the workloads per queue.

Figures: ``wall_s`` from the first submission until every workload ended; ``usage_pct``, the
GPU-seconds held over (600 GPUs x ``wall_s``); ``alloc_latency_ms`` (submission to grant)
p50/p99 per class; ``scheduled_per_s``; then ``double_booked_gpus`` and ``lost_workloads``
checked from the log. Beside them, the engine alone in this process on the same workloads
(``bench.kueue_engine``: the same cycles without the database, broker and HTTP), so that
``wall_vs_engine_makespan`` shows what the plumbing costs.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings
from django.core.management.base import CommandError
from django.test import override_settings

from bench import kueue_engine
from bench.api import _database_url, _free_port, _serving
from bench.kueue_engine import (
    BORROWING_LIMIT,
    CLASSES,
    COHORTS,
    GPUS_PER_NODE,
    NODES,
    NOMINAL_GPUS,
    QUEUES_PER_COHORT,
)
from bench.registry import peak_rss_mb, scratch_database, suite
from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Cluster, GpuModel, Node
from neocloud.celery import app as celery_app
from neocloud.core.transactions import atomic_with_retry
from scheduler import audit, scheduling, services
from scheduler.engine.model import WHOLE
from scheduler.models import Allocation as AllocationRow
from scheduler.models import Workload
from tenants.access import Actor
from tenants.models import Scope
from tenants.services import (
    api_key_create,
    organization_create,
    project_create,
    quota_set,
    user_register,
)

CLIENT_THREADS = 8
# Each queue's workloads of a class are one spec: an integrator submits them as one array.
# This share of them (at least one) is submitted one by one instead, to measure that rate too.
SINGLE_SHARE = 0.02
WORKER_CONCURRENCY = 4  # runs mostly wait on commits
FINISH_TIMEOUT_S = 1800.0
TICK_S = 2.0
ACTOR = Actor.system_actor("bench")


@dataclass(frozen=True)
class Planned:
    key: str  # the API key of its organization
    project: str
    name: str
    kind: str
    count: int | None = None  # an array of this many tasks; None: one workload, alone


def h100_cluster() -> tuple[Cluster, GpuModel]:
    """The suites' cluster ``bench-1`` and its GPU model, ``h100``."""
    region = atomic_with_retry(inventory.region_define, actor=ACTOR, slug="bench", name="B")
    cluster = atomic_with_retry(
        inventory.cluster_define, actor=ACTOR, region=region, slug="bench-1", name="B1"
    )
    model = atomic_with_retry(
        inventory.gpu_model_define,
        actor=ACTOR,
        slug="h100",
        name="H100",
        vendor="NVIDIA",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=False,
    )
    return cluster, model


def _seed() -> list[tuple[str, str]]:
    """The fleet, five organizations (one per cohort) of six projects, their queues and
    quotas, and the workloads to submit, interleaved over the queues."""
    with override_settings(SIMULATED_STEP_DELAY_S=0), _eager():
        cluster, model = h100_cluster()
        for n in range(NODES):
            node, _ = atomic_with_retry(
                inventory.node_register,
                actor=ACTOR,
                cluster=cluster,
                name=f"b{n:03d}",
                gpu_model=model,
                cpu_milli=128_000,
                memory_mib=1_048_576,
                gpus=[inventory.GpuSlot(index=g) for g in range(GPUS_PER_NODE)],
            )
            atomic_with_retry(inventory.node_provision, actor=ACTOR, node=node)
        if Node.objects.exclude(state=NodeState.READY).exists():
            raise CommandError("the bench fleet did not become ready")
        for name, (_, _, _, _, priority) in CLASSES.items():
            atomic_with_retry(
                services.priority_class_define, actor=ACTOR, name=f"bench-{name}", value=priority
            )
    owner = atomic_with_retry(user_register, actor=ACTOR, email="owner@bench.example")
    queues: list[tuple[str, str]] = []
    for c in range(COHORTS):
        organization = atomic_with_retry(
            organization_create, actor=ACTOR, name=f"Cohort {c}", owner=owner, slug=f"c{c}"
        )
        _, key = atomic_with_retry(
            api_key_create,
            actor=ACTOR,
            organization=organization,
            name="bench",
            scopes=[Scope.READ, Scope.WRITE],
            user=owner,
        )
        for q in range(QUEUES_PER_COHORT):
            project = atomic_with_retry(
                project_create, actor=ACTOR, organization=organization, name=f"q{c}-{q}"
            )
            atomic_with_retry(
                quota_set,
                actor=ACTOR,
                organization=organization,
                project=project,
                gpu_model="h100",
                max_gpus=NOMINAL_GPUS,
            )
            atomic_with_retry(
                services.queue_configure,
                actor=ACTOR,
                project=project,
                cohort=f"cohort-{c}",
                borrowing_limit=BORROWING_LIMIT,
            )
            queues.append((key, str(project.pk)))
    # Seeding ran cycles in this process, which took the lease: the workers' now.
    scheduling.leases_release(scheduling.holder_name())
    return queues


def _plan(queues: list[tuple[str, str]], scale: float) -> tuple[list[Planned], list[Planned]]:
    """The arrays (one per queue and class, interleaved over the queues), then the workloads
    submitted alone (``SINGLE_SHARE`` of each class and queue, at least one)."""
    per_queue = [(kind, max(1, round(spec[0] * scale))) for kind, spec in CLASSES.items()]
    arrays: list[Planned] = []
    singles: list[Planned] = []
    for kind, count in per_queue:
        alone = math.ceil(count * SINGLE_SHARE)
        for key, project in queues:
            if count > alone:
                arrays.append(Planned(key, project, f"{kind}-array", kind, count - alone))
            singles += [Planned(key, project, f"{kind}-{i}", kind) for i in range(alone)]
    singles.sort(key=lambda p: int(p.name.rsplit("-", 1)[1]))  # interleaved over the queues
    return arrays, singles


@contextmanager
def _eager() -> Iterator[None]:
    conf = celery_app.conf
    saved = conf.task_always_eager
    conf.task_always_eager = True
    try:
        yield
    finally:
        conf.task_always_eager = saved


def _env(queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "SIMULATED_STEP_DELAY_S": "0",
        "SCHEDULER_DEBOUNCE_S": "0.05",
        "SECRET_KEY": settings.SECRET_KEY,
    }


@contextmanager
def _workers(queue: str) -> Iterator[None]:
    log_path = settings.BASE_DIR / "var" / "bench-e2e-worker.log"
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("w+b") as log:
        worker = subprocess.Popen(  # noqa: S603 - a fixed command line, no shell
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "neocloud",
                "worker",
                "--concurrency",
                str(WORKER_CONCURRENCY),
                "--prefetch-multiplier",
                "4",
                "-Q",
                queue,
                "-n",
                f"bench-{os.getpid()}@%h",
                "--loglevel",
                "INFO",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=settings.BASE_DIR,
            env=_env(queue),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            time.sleep(3.0)  # the worker connects; tasks sent before wait in Redis anyway
            if worker.poll() is not None:
                raise CommandError(f"the celery worker exited:\n{_tail(log)}")
            yield
        finally:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


@dataclass
class _Submitted:
    """When each workload was sent (by id), how many requests failed, and how long."""

    sent: dict[str, float]
    errors: int
    seconds: float


def _submit_all(port: int, planned: list[Planned]) -> _Submitted:
    """Submit ``planned`` from ``CLIENT_THREADS`` keep-alive clients: an array through
    ``POST /api/v1/workloads/batch``, a single workload through ``POST /api/v1/workloads``."""
    sent_at: dict[str, float] = {}
    errors = 0
    lock = threading.Lock()

    def client(part: list[Planned]) -> None:
        nonlocal errors
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for item in part:
            _, g, n, rt, _ = CLASSES[item.kind]
            spec: dict[str, Any] = {
                "project": item.project,
                "name": item.name,
                "gpu_models": ["h100"],
                "gpus_per_node": g,
                "nodes": n,
                "runtime_estimate_s": rt,
                "priority_class": f"bench-{item.kind}",
            }
            path = "/api/v1/workloads"
            if item.count is not None:
                path, spec["array"] = f"{path}/batch", {"count": item.count}
            sent = time.time()
            conn.request(
                "POST",
                path,
                body=json.dumps(spec),
                headers={
                    "Authorization": f"Bearer {item.key}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": str(uuid.uuid4()),
                },
            )
            response = conn.getresponse()
            payload = response.read()
            with lock:
                if response.status != 201:
                    errors += 1
                elif item.count is None:
                    sent_at[json.loads(payload)["id"]] = sent
                else:
                    sent_at.update((w["id"], sent) for w in json.loads(payload)["workloads"])
        conn.close()

    began = time.time()
    parts = [planned[i::CLIENT_THREADS] for i in range(CLIENT_THREADS)]
    threads = [threading.Thread(target=client, args=(part,)) for part in parts if part]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return _Submitted(sent_at, errors, time.time() - began)


def _rate(submitted: _Submitted) -> float | None:
    return round(len(submitted.sent) / submitted.seconds, 1) if submitted.sent else None


def _ticking(stop: threading.Event) -> None:
    """Beat's tick, from this process (the benchmark runs no beat)."""
    from scheduler import tasks

    while not stop.wait(TICK_S):
        tasks.tick.delay()


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0}
    ordered = sorted(values)
    return {
        "p50": round(ordered[len(ordered) // 2], 1),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
    }


def _measure(submitted: dict[str, float], started: float) -> dict[str, Any]:
    rows = {str(w.pk): w for w in Workload.objects.all()}
    first_grant: dict[str, float] = {}
    held_gpu_s = 0.0
    for allocation in AllocationRow.objects.order_by("granted_at"):
        workload = str(allocation.workload_id)
        first_grant.setdefault(workload, allocation.granted_at.timestamp())
        if allocation.released_at is not None:
            seconds = (allocation.released_at - allocation.granted_at).total_seconds()
            held_gpu_s += allocation.gpu_milli / WHOLE * seconds
    ended = max(w.finished_at.timestamp() for w in rows.values() if w.finished_at)
    wall = ended - started
    latency: dict[str, list[float]] = {kind: [] for kind in CLASSES}
    for workload, sent in submitted.items():
        kind = rows[workload].name.split("-", 1)[0]
        if workload in first_grant:
            latency[kind].append((first_grant[workload] - sent) * 1000)
    quota_gpus = COHORTS * QUEUES_PER_COHORT * NOMINAL_GPUS
    return {
        "wall_s": round(wall, 2),
        "usage_pct": round(100 * held_gpu_s / (quota_gpus * wall), 1),
        "alloc_latency_ms": {kind: _percentiles(v) for kind, v in latency.items()},
        "scheduled_per_s": round(len(first_grant) / wall, 1),
    }


@suite("e2e")
def bench_e2e(scale: float) -> dict[str, Any]:
    if not settings.REDIS_URL or "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        raise CommandError("bench e2e needs PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
    with scratch_database():
        queues = _seed()
        arrays, singles = _plan(queues, scale)
        queue = f"bench-e2e-{os.getpid()}"
        celery_app.conf.task_default_queue = queue
        os.environ["CELERY_TASK_DEFAULT_QUEUE"] = queue
        port = _free_port()
        stop = threading.Event()
        ticker = threading.Thread(target=_ticking, args=(stop,), daemon=True)
        with _workers(queue), _serving_api(port, queue):
            ticker.start()
            started = time.time()
            # The arrays first, then the workloads alone (their rate measured under load).
            by_array = _submit_all(port, arrays)
            alone = _submit_all(port, singles)
            submit_s = time.time() - started
            deadline = time.monotonic() + FINISH_TIMEOUT_S
            while Workload.objects.filter(finished_at__isnull=True).exists():
                if time.monotonic() > deadline:
                    raise CommandError("workloads did not all finish in time")
                time.sleep(0.5)
            stop.set()
            figures = _measure({**by_array.sent, **alone.sent}, started)
        checked = audit.audit_log().as_dict()
        engine = kueue_engine.engine_alone(scale)
    return {
        "workloads": sum(p.count or 1 for p in arrays + singles),
        "submit_errors": by_array.errors + alone.errors,
        "submit_s": round(submit_s, 2),
        "array_requests": len(arrays),
        "array_workloads_per_s": _rate(by_array),
        "single_submissions": len(singles),
        "single_submissions_per_s": _rate(alone),
        **figures,
        "double_booked_gpus": checked["double_booked_gpus"],
        "lost_workloads": checked["lost_workloads"],
        **engine,
        "wall_vs_engine_makespan": round(figures["wall_s"] / engine["engine_makespan_s"], 2)
        if engine["engine_makespan_s"]
        else None,
        "kueue_reference": {"wall_s": 351, "usage_pct": 58.7},
        "peak_rss_mb": peak_rss_mb(),
    }


@contextmanager
def _serving_api(port: int, queue: str) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(_env(queue))
    try:
        with _serving(port):
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
