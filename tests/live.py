"""A live control plane and real node agents, as processes a test can stop and kill.

``ControlPlane`` is gunicorn with one uvicorn worker serving the project's ASGI application on
the test database, as in production (long polls wait in coroutines, holding no thread); its
tasks go to the test's queue, for a real ``celery worker`` (``tests.celery_worker``).
``NodeAgent`` is ``python -m agent.cli`` with fake GPUs and a state directory of the test's
own. Both are started in their own sessions: killing one never reaches the test, and an
agent's runs (in their own sessions too) outlive it, as on a real server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from tests.celery_worker import PROJECT_ROOT, worker_env
from tests.paths import searchable

READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class _Process:
    """One process group started from the project's root, its output in a file."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def _spawn(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the process (its group: gunicorn's workers die with it; an agent's runs
        are in sessions of their own and live on)."""
        if self.process is None or self.process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


class ControlPlane(_Process):
    """gunicorn (a uvicorn worker) on a port of its own; ``stop()`` and ``start()`` again keep
    the address."""

    def __init__(self, *, queue: str, log_dir: Path, settings: Mapping[str, Any]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "neocloud.asgi:application",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--worker-class",
            "uvicorn_worker.UvicornWorker",
            "--workers",
            "1",
            "--timeout",
            "120",
            "--graceful-timeout",
            "2",
        ]
        super().__init__(
            command,
            worker_env(queue=queue, settings=settings),
            log_dir / f"control-plane-{uuid.uuid4().hex[:8]}.log",
        )

    def start(self) -> ControlPlane:
        self._spawn()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if not self.alive:
                raise RuntimeError(f"the control plane exited:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the control plane did not answer in time:\n{self.log()}")
            time.sleep(0.1)
        return self

    def threads(self) -> int:
        """The threads of every process of its session (gunicorn and its worker)."""
        assert self.process is not None
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getsid(int(entry.name)) != self.process.pid:
                    continue
                status = (entry / "status").read_text()
            except OSError:
                continue  # gone, or not ours to read
            total += int(status.split("Threads:")[1].split()[0])
        return total

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/", timeout=2):  # noqa: S310
                return True
        except urllib.error.HTTPError:
            return True  # it answered (401 without credentials)
        except OSError:
            return False


class NodeAgent(_Process):
    """``neocloud-agent`` for one node, with fake GPUs; restartable on the same state."""

    def __init__(
        self,
        *,
        url: str,
        node_id: uuid.UUID,
        token: str,
        work_dir: Path,
        gpus: int,
        gpu_model: str,
        extra: Sequence[str] = (),
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        searchable(work_dir)
        self.state_dir = work_dir / "state"
        self.token_file = work_dir / "token"
        self.token_file.write_text(token)
        self.token_file.chmod(0o600)
        command = [
            sys.executable,
            "-m",
            "agent.cli",
            "--url",
            url,
            "--node-id",
            str(node_id),
            "--token-file",
            str(self.token_file),
            "--state-dir",
            str(self.state_dir),
            "--fake-gpus",
            str(gpus),
            "--gpu-model",
            gpu_model,
            "--heartbeat-s",
            "1",
            "--poll-wait-s",
            "2",
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE"))}
        env["PYTHONPATH"] = str(PROJECT_ROOT)
        super().__init__(command, env, work_dir / f"agent-{uuid.uuid4().hex[:8]}.log")

    def start(self) -> NodeAgent:
        self._spawn()
        return self


def run_processes(assignment_id: str) -> list[int]:
    """Every live process of a run: whatever carries its ``NEOCLOUD_ASSIGNMENT_ID`` (children
    inherit it, even those that left the run's process group)."""
    marker = f"NEOCLOUD_ASSIGNMENT_ID={assignment_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone, or not ours to read
        if marker in environ.split(b"\0") and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(int(entry.name))
    return found


def kill_runs(assignment_ids: Sequence[str]) -> None:
    """SIGKILL whatever is left of these runs (a test's cleanup: agents were killed)."""
    for assignment_id in assignment_ids:
        for pid in run_processes(assignment_id):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
