"""``bench interactive`` (issue 32), part 1: submit-to-SSH-prompt of a dev environment on an
idle node, beside the plain job's submit-to-running on the same control plane and agents.

Every process is real, as in ``bench execution`` (whose scratch database, gunicorn and node
agents it reuses): a workload is submitted through ``POST /api/v1/workloads``; a plain job's
time is submission to its agent's ``started`` report (``Assignment.started_at``); a dev
environment's is submission to the first ``ssh -p PORT run@127.0.0.1 true`` that succeeds
(the agent made its host key, files and sshd; the client polls the workload's
``ssh_commands`` and then tries every 50 ms). Each is cancelled before the next, so every
one starts on an idle node. Needs PostgreSQL, OpenSSH and nss_wrapper (``apt-get install
openssh-server openssh-client libnss-wrapper``).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError
from django.db import connection

from agent import ssh
from bench.api import _free_port, _serving
from bench.e2e import _percentiles
from bench.execution import LONG_POLL_S, SERVER_THREADS, Seed, _agents, _provision, _seed
from bench.registry import peak_rss_mb, scratch_database, suite
from execution.models import Assignment
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.models import User
from tenants.services import ssh_key_add

ROUNDS = 5  # of each, at scale 1
PROMPT_TIMEOUT_S = 60.0


def _call(port: int, seed: Seed, method: str, path: str, body: Any = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {seed.key}", "Content-Type": "application/json"}
    if method == "POST":
        headers["Idempotency-Key"] = str(uuid.uuid4())
    conn.request(method, path, body=json.dumps(body) if body else None, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    if response.status >= 300:
        raise CommandError(f"{method} {path}: HTTP {response.status} {payload[:300]!r}")
    return json.loads(payload) if payload else None


def _submit(port: int, seed: Seed, name: str, **fields: Any) -> tuple[str, float]:
    body = {"project": seed.project, "name": name, "gpu_models": ["h100"], **fields}
    sent = time.time()
    return str(_call(port, seed, "POST", "/api/v1/workloads", body)["id"]), sent


def _until(done: Any, what: str) -> Any:
    deadline = time.monotonic() + PROMPT_TIMEOUT_S
    while not (found := done()):
        if time.monotonic() > deadline:
            raise CommandError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return found


def _job_to_running(port: int, seed: Seed, n: int) -> float:
    ident, sent = _submit(port, seed, f"job-{n}", command=["sleep", "600"])
    started: Assignment = _until(
        lambda: Assignment.objects.filter(workload_id=ident, started_at__isnull=False).first(),
        "the job's start",
    )
    _call(port, seed, "POST", f"/api/v1/workloads/{ident}/cancel")
    assert started.started_at is not None  # noqa: S101 - filtered so above
    return (started.started_at.timestamp() - sent) * 1000


def _dev_to_prompt(port: int, seed: Seed, n: int, key: Path) -> float:
    ident, sent = _submit(port, seed, f"dev-{n}", kind="dev")
    shown = _until(
        lambda: _call(port, seed, "GET", f"/api/v1/workloads/{ident}")["ssh_commands"],
        "the dev environment's ssh command",
    )
    ssh_port = shown[0].split(" -p ")[1].split()[0]
    argv = ["ssh", "-i", str(key), "-p", ssh_port, "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=5", f"{ssh.USER}@127.0.0.1", "true"]  # fmt: skip
    _until(
        lambda: subprocess.run(argv, capture_output=True, check=False).returncode == 0,  # noqa: S603
        "an SSH prompt",
    )
    prompt = time.time()
    _call(port, seed, "POST", f"/api/v1/workloads/{ident}/cancel")
    return (prompt - sent) * 1000


@suite("interactive")
def bench_interactive(scale: float) -> dict[str, Any]:
    if connection.vendor != "postgresql":
        raise CommandError("bench interactive serves PostgreSQL to gunicorn: set DATABASE_URL")
    if ssh.available():
        raise CommandError(f"bench interactive: {ssh.available()}")
    rounds = max(2, round(ROUNDS * scale))
    with scratch_database(), tempfile.TemporaryDirectory(prefix="bench-interactive-") as scratch:
        Path(scratch).chmod(0o711)  # runs (users of their own) reach their work below it
        seed = _seed()
        key = Path(scratch) / "client"
        subprocess.run(  # noqa: S603
            ["/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
        )
        owner = User.objects.get(email="owner@bench.example")
        public = Path(f"{key}.pub").read_text()
        atomic_with_retry(ssh_key_add, actor=Actor(user=owner), public_key=public)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with (
            _serving(port, workers=1, threads=SERVER_THREADS, env={"REDIS_URL": ""}),
            _agents(seed, url, LONG_POLL_S, Path(scratch) / "a") as agents,
        ):
            _provision(seed, agents)
            _job_to_running(port, seed, -1)  # warm-up
            jobs = [_job_to_running(port, seed, n) for n in range(rounds)]
            devs = [_dev_to_prompt(port, seed, n, key) for n in range(rounds)]
    job, dev = _percentiles(jobs), _percentiles(devs)
    return {
        "suite": "interactive",
        "scale": scale,
        "rounds": rounds,
        "submit_to_ssh_prompt_ms": dev,
        "baseline": "a plain job's submission to its agent's started report, same agents",
        "submit_to_running_ms": job,
        "ratios": {
            "prompt_vs_running_p50": round(dev["p50"] / job["p50"], 3) if job["p50"] else None
        },
        "peak_rss_mb": peak_rss_mb(),
    }
