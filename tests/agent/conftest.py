"""Fixtures of the agent's tests: a fake control plane, and real agent processes against it.

Nothing here touches the database: the agent knows no Django."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agent.fake_control_plane import FakeControlPlane
from tests.paths import searchable

ROOT = Path(__file__).resolve().parents[2]
NODE_ID = "7f3c9a2e-5b1d-4c6e-9a0f-1d2e3f4a5b6c"
MODEL = "NVIDIA A100-SXM4-80GB"


class AgentProcess:
    """``python -m agent.cli`` with fast intervals and four fake GPUs."""

    def __init__(
        self, plane: FakeControlPlane, tmp: Path, *extra: str, real_gpus: bool = False
    ) -> None:
        self.gpus = [] if real_gpus else ["--fake-gpus", "4", "--gpu-model", MODEL]
        self.plane = plane
        self.state_dir = searchable(tmp) / "state"
        self.token_file = tmp / "token"
        if not self.token_file.exists():
            self.token_file.write_text(plane.token + "\n")
            self.token_file.chmod(0o600)
        self.log_file = tmp / f"agent-{len(list(tmp.glob('agent-*.log')))}.log"  # one each
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "agent.cli",
            "--url", self.plane.url, "--node-id", NODE_ID,
            "--token-file", str(self.token_file), "--state-dir", str(self.state_dir),
            *self.gpus, "--advertise-address", "127.0.0.1",
            "--heartbeat-s", "0.3", "--poll-wait-s", "1", "--log-level", "DEBUG",
            *self.extra,
        ]  # fmt: skip

    def start(self) -> AgentProcess:
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                self.argv(),
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def signal(self, signum: signal.Signals) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_file.read_text()


@pytest.fixture
def plane() -> Iterator[FakeControlPlane]:
    control_plane = FakeControlPlane(NODE_ID)
    control_plane.start()
    yield control_plane
    control_plane.stop()


@pytest.fixture
def agents(plane: FakeControlPlane, tmp_path: Path) -> Iterator[list[AgentProcess]]:
    """Agents started by a test (see ``start_agent``); killed afterwards, with their runs."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        if agent.process is not None and agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait(timeout=10)
    for report in plane.applied:
        if report["kind"] == "started" and report.get("pid"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(report["pid"], signal.SIGKILL)


@pytest.fixture
def start_agent(
    plane: FakeControlPlane, tmp_path: Path, agents: list[AgentProcess]
) -> Callable[..., AgentProcess]:
    def start(*extra: str, real_gpus: bool = False) -> AgentProcess:
        agent = AgentProcess(plane, tmp_path, *extra, real_gpus=real_gpus).start()
        agents.append(agent)
        return agent

    return start


@pytest.fixture
def preload(tmp_path: Path) -> tuple[Path, Path]:
    """A shared library whose constructor writes ``hit-<uid>`` into a folder anyone may write:
    set as a run's LD_PRELOAD, it shows which processes loaded it, as whom (root: the host)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the LD_PRELOAD library")
    hits = searchable(tmp_path) / "hits"
    hits.mkdir()
    hits.chmod(0o1777)
    source = tmp_path / "hit.c"
    source.write_text(
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void hit(void) {\n"
        f'  char path[4096]; snprintf(path, sizeof path, "{hits}/hit-%d", (int)getuid());\n'
        '  FILE *file = fopen(path, "a"); if (file) { fprintf(file, "%d\\n", (int)getpid());'
        " fclose(file); }\n}\n"
    )
    library = tmp_path / "hit.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    library.chmod(0o755)
    return library, hits
