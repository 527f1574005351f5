"""The shim writes down how its command ended, and that it started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agent.runtimes import shim_argv


def run_shim(tmp_path: Path, command: list[str]) -> tuple[dict[str, object], Path]:
    ready = tmp_path / "ready.json"
    status = tmp_path / "status.json"
    argv = shim_argv(status_file=status, ready_file=ready, command=command)
    subprocess.run(argv, check=False, timeout=10, capture_output=True)
    return json.loads(status.read_text()), ready


@pytest.mark.parametrize(
    ("command", "ending"),
    [
        (["sh", "-c", "exit 3"], {"exit_code": 3, "signal": None}),
        (["sh", "-c", "kill -9 $$"], {"exit_code": None, "signal": 9}),
    ],
    ids=["exit-code", "signal"],
)
def test_the_status_file_holds_the_exit(
    tmp_path: Path, command: list[str], ending: dict[str, object]
) -> None:
    status, ready = run_shim(tmp_path, command)

    assert {k: status[k] for k in ending} == ending
    assert json.loads(ready.read_text())["cgroup"] == {"applied": False, "note": ""}


def test_a_command_that_cannot_start_is_an_error_not_an_exit(tmp_path: Path) -> None:
    status, ready = run_shim(tmp_path, ["/nonexistent/cmd"])

    assert "cannot start" in str(status["error"])
    assert not ready.exists()


def test_the_shim_outlives_sigterm_to_record_the_commands_end(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    ready = tmp_path / "ready.json"
    argv = shim_argv(status_file=status, ready_file=ready, command=["sleep", "30"])
    shim = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + 5
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)

    os.killpg(shim.pid, signal.SIGTERM)  # the whole group, as a stop does

    assert shim.wait(timeout=5) == 0
    assert json.loads(status.read_text())["signal"] == signal.SIGTERM
