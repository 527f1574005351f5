"""Two tenants' runs on one node under a real agent: each is a user of its own, and neither
can see or touch the other, the agent's credentials and state, or the other's GPUs.

Run B is the attacker: a probe (tests/agent/probe.py, run by the host's /usr/bin/python3)
that tries what a customer's code would and prints what it got. Everything here needs a root
agent (only root can give a run another uid) and is skipped, saying so, elsewhere; the
limits need cgroups, the device fence a cgroup devices controller or BPF device programs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import cgroups, users
from tests.agent.conftest import AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane
from tests.paths import searchable

StartAgent = Callable[..., AgentProcess]
PROBE = Path(__file__).with_name("probe.py")
PYTHON = "/usr/bin/python3"  # any user can run it (the test's own Python may be under /root)
UIDS = range(4_000_000, 4_100_000)

pytestmark = [
    pytest.mark.skipif(not users.isolating(), reason="runs get uids of their own only as root"),
    pytest.mark.skipif(not Path(PYTHON).exists(), reason=f"{PYTHON} is needed to run the probe"),
]
has_cgroups = pytest.mark.skipif(
    not cgroups.probe().available, reason=f"no cgroups for runs: {cgroups.probe().note}"
)
limits_memory = pytest.mark.skipif(
    "memory" not in cgroups.probe().controllers, reason=f"no memory limit: {cgroups.probe().note}"
)


def probe(
    plane: FakeControlPlane, ident: str, checks: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    """Run the probe as assignment ``ident`` and return what it found."""
    plane.assign(
        ident,
        argv=[PYTHON, str(PROBE)],
        env={"PROBE": json.dumps(checks), "B_SECRET": "tenant-b-secret"},
        **fields,
    )
    plane.wait_for(lambda: plane.ended(ident), timeout=60)
    lines = plane.output(ident).decode().splitlines()
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def started(plane: FakeControlPlane, ident: str) -> dict[str, Any]:
    plane.wait_for(lambda: bool(plane.reports(ident, "started")), timeout=30)
    report: dict[str, Any] = plane.reports(ident, "started")[0]
    return report


def child_of(pid: int) -> int:
    """The run's command: the shim's one child."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError(f"the shim {pid} has no child")


def owner(pid: int) -> int:
    return Path(f"/proc/{pid}").stat().st_uid


@pytest.fixture
def tenant_a(plane: FakeControlPlane, start_agent: StartAgent) -> Iterator[dict[str, Any]]:
    """Tenant A's run, alive, with a secret in its environment, a file in its working
    directory and one in /tmp; the agent that runs it."""
    script = (
        "echo a-file-data > secret.txt; t=/tmp/nc-a-$(id -u)-$$.txt; echo a-tmp-data > $t; "
        'echo "ready $(id -u) $t"; exec sleep 60'
    )
    plane.assign("a", argv=["sh", "-c", script], env={"A_SECRET": "tenant-a-secret"})
    agent = start_agent("--pids-max", "64")
    shim = started(plane, "a")["pid"]
    plane.wait_for(lambda: plane.output("a").startswith(b"ready"))
    yield {"agent": agent, "shim": shim, "command": child_of(shim)}
    plane.release("a")


def test_a_run_is_a_user_of_its_own_without_privileges(
    plane: FakeControlPlane, tenant_a: dict[str, Any]
) -> None:
    found = probe(plane, "b", {"self": True})
    a_uid = int(plane.output("a").split()[1])

    assert found["uid"] in UIDS
    assert found["gid"] == found["uid"]
    assert a_uid in UIDS
    assert a_uid != found["uid"]
    assert found["groups"] == []
    assert found["no_new_privs"] == "1"
    assert found["umask"] == 0o077
    assert owner(tenant_a["command"]) == a_uid
    assert owner(tenant_a["shim"]) == 0  # the witness stays the agent's


def test_b_cannot_read_as_environment_files_or_the_agents_credentials(
    plane: FakeControlPlane, tenant_a: dict[str, Any]
) -> None:
    agent: AgentProcess = tenant_a["agent"]
    state = agent.state_dir
    a_run = state / "runs" / "a"
    a_tmp = plane.output("a").split()[2].decode()  # A's file in the shared /tmp
    targets = {
        "a_environ": f"/proc/{tenant_a['command']}/environ",
        "a_shim_environ": f"/proc/{tenant_a['shim']}/environ",
        "a_work_file": str(a_run / "work" / "secret.txt"),
        "a_tmp_file": a_tmp,
        "a_output": str(a_run / "output.log"),
        "a_record": str(a_run / "run.json"),
        "token": str(agent.token_file),
        "outbox": str(state / "outbox"),
        "runs": str(state / "runs"),
        "agent_environ": f"/proc/{agent.process.pid}/environ",  # type: ignore[union-attr]
    }

    found = probe(plane, "b", {"read": targets, "scan_environ": "tenant-a-secret"})

    assert found["read"] == {name: "denied" for name in targets}
    assert found["scan_environ"] == []  # no process's environment holds A's secret for B
    assert b"tenant-b-secret" not in Path(agent.log_file).read_bytes()


def test_what_process_runs_share_the_host_network_and_the_process_list(
    plane: FakeControlPlane, tenant_a: dict[str, Any]
) -> None:
    targets = {"a_cmdline": f"/proc/{tenant_a['command']}/cmdline"}

    found = probe(plane, "b", {"self": True, "read": targets})

    assert found["netns"] == os.readlink("/proc/self/ns/net")  # the host's network
    assert found["read"] == {"a_cmdline": "done"}  # A's command line is visible to B


def test_b_cannot_signal_or_trace_a(plane: FakeControlPlane, tenant_a: dict[str, Any]) -> None:
    pids = [tenant_a["command"], tenant_a["shim"]]

    found = probe(plane, "b", {"signal": pids, "trace": pids})

    assert found["signal"] == {str(pid): "denied" for pid in pids}
    assert found["trace"] == {str(pid): "denied" for pid in pids}
    assert Path(f"/proc/{tenant_a['command']}").exists()
    assert not plane.ended("a")


def test_a_fork_bomb_in_b_is_contained_to_b(
    plane: FakeControlPlane, tenant_a: dict[str, Any]
) -> None:
    found = probe(plane, "b", {"fork": 500})

    assert 10 < found["fork"] < 64  # stopped at its --pids-max, the node untouched
    plane.assign("c", argv=["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 0.1 & done; wait"])
    plane.wait_for(lambda: plane.ended("c"), timeout=30)
    assert plane.reports("c", "exited")[0]["exit_code"] == 0  # another run still forks


@limits_memory
def test_a_memory_hog_in_b_is_killed_alone_and_reported_out_of_memory(
    plane: FakeControlPlane, tenant_a: dict[str, Any]
) -> None:
    plane.assign("b", argv=[PYTHON, "-c", "x = bytearray(512 * 1024 * 1024)"], memory_mib=64)
    plane.wait_for(lambda: plane.ended("b"), timeout=60)

    (exited,) = plane.reports("b", "exited")
    assert (exited["signal"], exited["oom"]) == (9, True)
    assert not plane.ended("a")
    assert Path(f"/proc/{tenant_a['command']}").exists()


def test_what_a_run_leaves_behind_is_cleared_before_its_uid_goes_to_another(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    script = (
        "echo left > /tmp/nc-left-$(id -u); setsid sleep 300 > /dev/null 2>&1 & "
        'sleep 0.5; echo "uid $(id -u)"'
    )
    plane.assign("a", argv=["sh", "-c", script])
    agent = start_agent("--run-uids", "4099990-4099990")  # one uid: b waits for a's
    plane.wait_for(lambda: plane.ended("a"), timeout=30)
    uid = int(plane.output("a").split()[1])

    assert users.busy_uids().isdisjoint({uid})  # the escaped `sleep 300` is gone
    assert not Path(f"/tmp/nc-left-{uid}").exists()  # noqa: S108
    assert not (agent.state_dir / "runs" / "a" / "work").exists()
    plane.assign("b", argv=["sh", "-c", "id -u"])
    plane.wait_for(lambda: plane.ended("b"), timeout=30)
    assert int(plane.output("b")) == uid == 4099990  # free again, and handed out again


def test_a_runs_ld_preload_reaches_its_command_and_no_host_process(
    plane: FakeControlPlane, start_agent: StartAgent, preload: tuple[Path, Path]
) -> None:
    library, hits = preload
    plane.assign("a", argv=["sh", "-c", "id -u"], env={"LD_PRELOAD": str(library)})
    start_agent()
    plane.wait_for(lambda: plane.ended("a"), timeout=30)
    uid = int(plane.output("a").decode().split()[-1])

    assert uid != 0
    assert sorted(path.name for path in hits.iterdir()) == [f"hit-{uid}"]  # the run's, not root's


def test_the_state_directory_is_closed_to_runs(
    plane: FakeControlPlane, tenant_a: dict[str, Any]
) -> None:
    state: Path = tenant_a["agent"].state_dir
    modes = {
        path.name: stat.S_IMODE(path.stat().st_mode)
        for path in [state, state / "runs", state / "outbox", state / "runs" / "a"]
    }
    files = [p for p in state.rglob("*") if p.is_file() and "work" not in p.parts]

    assert modes == {"state": 0o711, "runs": 0o711, "outbox": 0o700, "a": 0o711}
    assert files
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    assert not (state / "runs" / "a" / "env.json").exists()  # read by the shim, then removed


def test_output_past_the_cap_takes_no_disk(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a", argv=["sh", "-c", "head -c 20000000 /dev/zero; echo written; sleep 60"])
    agent = start_agent("--log-max-bytes", "100000")
    output = agent.state_dir / "runs" / "a" / "output.log"
    plane.wait_for(lambda: output.exists() and output.stat().st_size >= 20_000_008, timeout=30)

    assert output.stat().st_blocks * 512 < 1024 * 1024  # 20 MB long, under 1 MiB on disk
    plane.release("a")
    plane.wait_for(lambda: plane.ended("a"), timeout=30)
    assert plane.dropped["a"] == 20_000_008 - 100_000
    assert plane.output("a") == bytes(100_000)


def test_a_process_runs_ports_must_lie_in_the_nodes_range(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a", argv=["true"], ports=[22])
    plane.assign("b", argv=["true"], ports=[30100])
    start_agent("--port-range", "30000-30999")
    plane.wait_for(lambda: plane.ended("a") and plane.ended("b"), timeout=30)

    (failed,) = plane.reports("a", "start_failed")
    assert "[22] are outside this node's range" in failed["message"]
    assert plane.reports("b", "ports")[0]["ports"] == [
        {"port": 30100, "address": "127.0.0.1:30100"}
    ]


@pytest.fixture
def gpu_files(tmp_path: Path) -> Path:
    """Four character devices standing in for /dev/nvidia0-3 (clones of /dev/zero, full,
    random and urandom: harmless to open; not /dev/null, which the shim itself opens)."""
    folder = tmp_path / "dev"
    folder.mkdir()
    for index, minor in enumerate((5, 7, 8, 9)):
        os.mknod(folder / f"gpu{index}", 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return folder


@has_cgroups
def test_a_run_opens_only_its_own_gpus_device_files(
    plane: FakeControlPlane, start_agent: StartAgent, gpu_files: Path
) -> None:
    files = {str(index): str(gpu_files / f"gpu{index}") for index in range(4)}
    start_agent("--fake-gpu-device-files", f"{gpu_files}/gpu{{index}}")

    found = probe(
        plane, "b", {"open": files}, gpus=[{"index": 1, "uuid": "x"}, {"index": 3, "uuid": "y"}]
    )

    assert "fenced (2)" in plane.reports("b", "started")[0]["cgroups"]["note"]
    assert found["open"] == {"0": "denied", "1": "opened", "2": "denied", "3": "opened"}


@pytest.mark.parametrize("exposed", ["token", "state"])
def test_the_agent_refuses_to_start_with_its_token_or_state_open_to_runs(
    tmp_path: Path, exposed: str
) -> None:
    token = searchable(tmp_path) / "token"
    token.write_text("secret-node-token")
    token.chmod(0o644 if exposed == "token" else 0o600)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700 if exposed == "state" else 0o755)
    argv = [
        sys.executable, "-m", "agent.cli", "--url", "http://127.0.0.1:9", "--node-id", "n1",
        "--token-file", str(token), "--state-dir", str(closed / "state"),
        "--fake-gpus", "1", "--gpu-model", "m",
    ]  # fmt: skip

    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    assert done.returncode == 2
    expected = "is open to others: chmod 600" if exposed == "token" else "is not searchable"
    assert expected in done.stderr
    assert "secret-node-token" not in done.stderr


def test_the_shipped_systemd_unit_is_the_safe_one() -> None:
    unit = (Path(__file__).parents[2] / "deploy" / "neocloud-agent.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[0] != "#"
    )

    assert settings["User"] == "root"  # the agent itself: it gives each run its own uid
    assert settings["StateDirectoryMode"] == "0711"
    assert settings["UMask"] == "0077"
    assert settings["Delegate"] == "yes"  # cgroups for the runs' limits and device fence
    assert "NEOCLOUD_RUN_UIDS" in unit
    assert "NEOCLOUD_PORT_RANGE" in unit
