"""SSH into a run (issue 32), for real: a root agent starts the distribution's sshd for the
run, as the run's uid and in its cgroups, and a real ``ssh`` client logs in with a key made
here. The login sees the run's GPUs, variables and working directory and nothing more; a key
not listed is refused, and a change of the listed keys takes effect without a restart."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent import cgroups, ssh, users
from tests.agent.conftest import AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane

StartAgent = Callable[..., AgentProcess]
UIDS = range(4_000_000, 4_100_000)
PORTS = ("--port-range", "34100-34199")  # apart from other tests' runs on this machine

pytestmark = [
    pytest.mark.skipif(not users.isolating(), reason="runs get uids of their own only as root"),
    pytest.mark.skipif(ssh.available() is not None, reason=str(ssh.available())),
    pytest.mark.skipif(
        not cgroups.probe().available, reason=f"no cgroups for runs: {cgroups.probe().note}"
    ),
]


def keygen(folder: Path, name: str) -> tuple[Path, str]:
    """A client key pair: the private key's path and the public key's line."""
    path = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True
    )
    return path, " ".join(Path(f"{path}.pub").read_text().split()[:2])


def login(key: Path, port: int, command: str, *jump: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10", *jump,
            f"{ssh.USER}@127.0.0.1", command,
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def ssh_port(plane: FakeControlPlane, ident: str) -> int:
    plane.wait_for(lambda: bool(plane.reports(ident, "ports")), timeout=30)
    (endpoint,) = [p for p in plane.reports(ident, "ports")[0]["ports"] if p["kind"] == "ssh"]
    assert endpoint["address"] == f"127.0.0.1:{endpoint['port']}"
    return int(endpoint["port"])


@pytest.fixture
def gpu_files(tmp_path: Path) -> Path:
    """Four character devices standing in for /dev/nvidia0-3 (as tests/agent/test_isolation)."""
    folder = tmp_path / "dev"
    folder.mkdir()
    for index, minor in enumerate((5, 7, 8, 9)):
        os.mknod(folder / f"gpu{index}", 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return folder


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    folder = tmp_path / "client"
    folder.mkdir(mode=0o700)
    return {name: keygen(folder, name) for name in ("mine", "other")}


def test_a_login_lands_in_the_run_with_its_gpus_env_and_uid_and_only_listed_keys_open_it(
    plane: FakeControlPlane,
    start_agent: StartAgent,
    gpu_files: Path,
    keys: dict[str, tuple[Path, str]],
) -> None:
    start_agent(*PORTS, "--fake-gpu-device-files", f"{gpu_files}/gpu{{index}}")
    plane.assign(
        "s",
        argv=["sleep", "600"],
        env={"GREETING": 'hello "there" world', "HF_TOKEN": "tok-123"},
        gpus=[{"index": 1, "uuid": "x"}, {"index": 3, "uuid": "y"}],
        ssh={"authorized_keys": [keys["mine"][1]]},
    )
    port = ssh_port(plane, "s")
    opens = "; ".join(
        f"(: < {gpu_files}/gpu{i}) 2>/dev/null && echo opened || echo denied" for i in range(4)
    )

    mine = login(
        keys["mine"][0],
        port,
        f'id -u; pwd; echo "$CUDA_VISIBLE_DEVICES"; echo "$GREETING"; echo "$HF_TOKEN"; {opens}',
    )
    other = login(keys["other"][0], port, "true")

    assert mine.returncode == 0, mine.stderr
    uid, cwd, visible, greeting, token, *opened = mine.stdout.splitlines()
    assert int(uid) in UIDS
    assert int(uid) == run_uid(plane, "s")
    assert cwd.endswith("/runs/s/work")
    assert visible == "1,3"
    assert greeting == 'hello "there" world'
    assert token == "tok-123"
    assert opened == ["denied", "opened", "denied", "opened"]
    assert other.returncode == 255
    assert "Permission denied" in other.stderr


def run_uid(plane: FakeControlPlane, ident: str) -> int:
    """The run's uid: the owner of the shim's children (its command and its sshd)."""
    shim: int = plane.reports(ident, "started")[0]["pid"]
    children = Path(f"/proc/{shim}/task/{shim}/children").read_text().split()
    return Path(f"/proc/{children[0]}").stat().st_uid


def test_a_key_removed_stops_opening_the_run_and_one_added_opens_it(
    plane: FakeControlPlane, start_agent: StartAgent, keys: dict[str, tuple[Path, str]]
) -> None:
    start_agent(*PORTS)
    plane.assign("s", argv=["sleep", "600"], ssh={"authorized_keys": [keys["mine"][1]]})
    port = ssh_port(plane, "s")
    assert login(keys["mine"][0], port, "true").returncode == 0

    plane.assign("s", argv=["sleep", "600"], ssh={"authorized_keys": [keys["other"][1]]})
    plane.wait_for(lambda: login(keys["other"][0], port, "true").returncode == 0, timeout=30)

    assert login(keys["mine"][0], port, "true").returncode == 255


def test_the_sshd_ends_with_the_run(
    plane: FakeControlPlane, start_agent: StartAgent, keys: dict[str, tuple[Path, str]]
) -> None:
    start_agent(*PORTS)
    plane.assign("s", argv=["sleep", "600"], ssh={"authorized_keys": [keys["mine"][1]]})
    port = ssh_port(plane, "s")

    plane.release("s")
    plane.wait_for(lambda: plane.ended("s"), timeout=30)

    assert login(keys["mine"][0], port, "true").returncode == 255


def test_an_idle_dev_environment_stops_after_its_idle_time_but_not_while_someone_is_in(
    plane: FakeControlPlane, start_agent: StartAgent, keys: dict[str, tuple[Path, str]]
) -> None:
    start_agent(*PORTS)  # fake GPUs: 0 % used, so only the SSH session keeps it busy
    plane.assign(
        "dev",
        argv=["sleep", "infinity"],
        gpus=[{"index": 0, "uuid": "x"}],
        ssh={"authorized_keys": [keys["mine"][1]]},
        idle_stop={"after_s": 2, "gpu_below_pct": 5},
    )
    port = ssh_port(plane, "dev")

    session = login(keys["mine"][0], port, "sleep 5; echo still-here")
    ended_during_session = plane.ended("dev")
    plane.wait_for(lambda: plane.ended("dev"), timeout=30)

    assert session.returncode == 0, session.stderr
    assert session.stdout.strip() == "still-here"
    assert not ended_during_session
    (exited,) = plane.reports("dev", "exited")
    assert exited["exit_code"] == 0
    assert exited["signal"] is None
    assert exited["message"] == "idle stop: no SSH session nor GPU use for 2.0 s"
