"""``manage.py demo`` for real, as ``make demo`` runs it: a server process with its own SQLite,
the in-process workers and one real node agent with fake GPUs. A job with a command, submitted
with the demo key, runs on the agent's node and prints its CUDA_VISIBLE_DEVICES into its logs,
as the demo tour (docs/getting-started/demo.md) shows; then it is metered."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.live import free_port
from tests.paths import searchable

ROOT = Path(__file__).resolve().parent.parent
DEMO_ENV_DROPPED = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")


class Demo:
    def __init__(self, url: str, key: str, process: subprocess.Popen[bytes]) -> None:
        self.url, self.key, self.process = url, key, process

    def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 - the test's own server
            f"{self.url}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=40) as response:  # noqa: S310
            return json.loads(response.read())


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - the test's own server
            return True
    except urllib.error.HTTPError:
        return True  # 401 without a key: it answers
    except OSError:
        return False


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in DEMO_ENV_DROPPED}
    var_dir = searchable(tmp_path)  # the agent's runs (users of their own) work below it
    env.update(NEOCLOUD_DEMO="1", NEOCLOUD_VAR_DIR=str(var_dir), SIMULATED_STEP_DELAY_S="0")
    log_path = tmp_path / "demo.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "demo", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        key_file = tmp_path / "demo-api-key.txt"
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"the demo exited:\n{log_path.read_text()}")
            if key_file.exists() and _answers(f"http://127.0.0.1:{port}/api/v1/"):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the demo did not answer in time:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield Demo(f"http://127.0.0.1:{port}", key_file.read_text().strip(), process)
    finally:
        with suppress(ProcessLookupError):  # a test may have stopped it
            os.killpg(process.pid, signal.SIGINT)  # as Ctrl-C: the demo stops its agent
        try:
            process.wait(20)
        finally:
            with suppress(ProcessLookupError):  # whatever of its group is left (its agent)
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.mark.smoke
def test_a_job_with_a_command_runs_under_the_demos_agent_and_prints_its_gpus(demo: Demo) -> None:
    project = demo.call("/api/v1/projects")["results"][0]["id"]
    job = demo.call(
        "/api/v1/workloads",
        {
            "project": project,
            "name": "real-run",
            "gpu_models": ["l4-24gb"],
            "gpus_per_node": 2,
            "command": ["sh", "-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; sleep 1"],
        },
    )
    deadline = time.monotonic() + 90
    while (status := demo.call(f"/api/v1/workloads/{job['id']}")["status"]) != "succeeded":
        assert status in {"pending", "admitted", "scheduled", "provisioning", "running"}, status
        assert time.monotonic() < deadline, f"still {status}"
        time.sleep(0.5)
    (assignment,) = demo.call(f"/api/v1/workloads/{job['id']}/assignments")
    assert assignment["node"] == "agent-01"
    assert assignment["exit_code"] == 0
    indices = ",".join(str(gpu["index"]) for gpu in assignment["gpus"])
    logs = demo.call(f"/api/v1/workloads/{job['id']}/logs")
    assert "".join(e["text"] for e in logs["entries"]) == f"CUDA_VISIBLE_DEVICES={indices}\n"
    assert logs["complete"] is True
    usage = demo.call("/api/v1/usage?group_by=gpu_model")["results"]
    (l4,) = [row for row in usage if row["gpu_model"] == "l4-24gb"]
    assert int(l4["milli_gpu_seconds"]) >= 2_000  # two GPUs for at least a second


@pytest.mark.smoke
def test_a_new_user_signs_in_submits_a_job_and_watches_it_run_and_be_metered(
    demo: Demo, page: Page
) -> None:
    """The demo tour's promise for ``make demo``, in the browser: the console at ``/``."""
    page.goto(f"{demo.url}/")
    page.get_by_label("E-mail").fill("demo@neocloud.local")
    page.get_by_label("Password").fill("demo")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    page.get_by_role("link", name="New workload").click()
    page.get_by_label("Name").fill("first-job")
    page.get_by_label("GPU model, first choice").select_option("a100-sxm4-80gb")
    page.get_by_label("GPUs per node").fill("2")
    page.get_by_label("Runtime estimate (seconds)").fill("2")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}$"))
    expect(page.locator("#nc-status")).to_have_text("succeeded", timeout=30_000)

    page.get_by_role("link", name="Usage").click()
    expect(page.get_by_role("cell", name="a100-sxm4-80gb").first).to_be_visible(timeout=10_000)
    usage = demo.call("/api/v1/usage?group_by=gpu_model")["results"]
    (a100,) = [row for row in usage if row["gpu_model"] == "a100-sxm4-80gb"]
    assert int(a100["milli_gpu_seconds"]) >= 4_000  # two GPUs for its two seconds


def test_work_waiting_in_the_demo_gets_an_estimated_start(demo: Demo) -> None:
    """The embedded default's path: SQLite, tasks in process, beat's tick asking for the
    estimates after its cycles (at most every SCHEDULER_ESTIMATE_INTERVAL_S, 30 s)."""
    project = demo.call("/api/v1/projects")["results"][0]["id"]
    body = {"project": project, "gpu_models": ["a100-sxm4-80gb"], "gpus_per_node": 4}
    body.update(nodes=2, runtime_estimate_s=3600)
    waits = {"pending", "admitted"}
    for i in range(32):  # until the model is full and one waits
        submitted = demo.call("/api/v1/workloads", {**body, "name": f"hour-{i}"})
        time.sleep(0.5)  # its cycle
        waiting = demo.call(f"/api/v1/workloads/{submitted['id']}")
        if waiting["status"] in waits:
            break
    assert waiting["status"] in waits, waiting
    deadline = time.monotonic() + 60
    while (shown := demo.call(f"/api/v1/workloads/{waiting['id']}"))["estimated_start"] is None:
        assert shown["status"] in waits, shown
        assert time.monotonic() < deadline, shown
        time.sleep(1)
    assert "runtime_estimates" in shown["estimate_basis"]
    assert shown["estimated_start_range"]["earliest"] <= shown["estimated_start"]


def _children(pid: int) -> list[tuple[int, str]]:
    """The processes whose parent is ``pid``, with their command lines."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid:
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                found.append((int(stat.parent.name), cmdline.decode()))
    return found


def _running(pid: int) -> bool:
    """Neither gone nor a zombie (an orphan's parent may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_to_the_demo_stops_its_agent(demo: Demo) -> None:
    """As a service manager or ``docker stop`` ends it: SIGTERM to the demo alone, not its
    group (Ctrl-C in a terminal signals the agent too)."""
    (agent,) = [pid for pid, cmdline in _children(demo.process.pid) if "agent.cli" in cmdline]

    demo.process.send_signal(signal.SIGTERM)

    demo.process.wait(20)
    deadline = time.monotonic() + 5
    while _running(agent):
        assert time.monotonic() < deadline, "the demo's agent still runs"
        time.sleep(0.1)
