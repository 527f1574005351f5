"""Volumes under real root agents: a run sees its volumes at their paths (and nothing of the
host's /mnt), what one run writes the project's next run reads, a read-only mount refuses
writes, another project's run reaches it neither mounted nor by its host path, and a shared
volume written through one node's agent is read through another's."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent import users
from tests.agent.conftest import AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane
from tests.paths import searchable

StartAgent = Callable[..., AgentProcess]

pytestmark = pytest.mark.skipif(not users.isolating(), reason="volumes are mounted by root only")


def volume(kind: str = "local", path: str = "/mnt/data", **fields: Any) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "type": kind, "host_path": "", "path": path} | fields


def sh(plane: FakeControlPlane, ident: str, script: str, *mounts: dict[str, Any]) -> str:
    """Run ``script`` as assignment ``ident`` with these volumes; its output once ended."""
    plane.assign(ident, argv=["sh", "-c", script], volumes=list(mounts))
    plane.wait_for(lambda: plane.ended(ident), timeout=30)
    return plane.output(ident).decode()


def test_a_file_written_by_one_run_is_read_and_changed_by_the_projects_next(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    agent = start_agent()
    data = volume()
    # The writer stays alive, so the reader is another uid.
    plane.assign(
        "writer",
        argv=["sh", "-c", "id -u > /mnt/data/by; echo ok; exec sleep 30"],
        volumes=[data],
    )
    plane.wait_for(lambda: plane.output("writer").startswith(b"ok"))

    found = sh(
        plane, "reader", "id -u; cat /mnt/data/by; echo more >> /mnt/data/by && echo w", data
    )

    reader_uid, writer_uid, wrote = found.split()
    assert reader_uid != writer_uid
    assert wrote == "w"
    host = agent.state_dir / "volumes" / data["id"]
    assert (host / "by").read_text() == f"{writer_uid}\nmore\n"
    assert host.stat().st_uid == 0
    assert oct(host.stat().st_mode & 0o7777) == oct(0o2770)
    assert oct(host.parent.stat().st_mode & 0o777) == oct(0o711)
    assert not Path("/mnt/data/by").exists()  # nothing reached the host's /mnt
    plane.release("writer")


def test_a_read_only_mount_refuses_writes(plane: FakeControlPlane, start_agent: StartAgent) -> None:
    agent = start_agent()
    data = volume()
    sh(plane, "fill", "echo kept > /mnt/data/f", data)

    found = sh(
        plane, "ro", "cat /mnt/data/f; (echo x > /mnt/data/f) 2>&1", data | {"read_only": True}
    )

    kept, refused = found.splitlines()
    assert kept == "kept"
    assert refused.endswith("Read-only file system")
    assert (agent.state_dir / "volumes" / data["id"] / "f").read_text() == "kept\n"


def test_another_projects_run_reaches_it_neither_mounted_nor_by_its_host_path(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    agent = start_agent()
    data, theirs = volume(), volume()
    sh(plane, "mine", "echo secret > /mnt/data/f", data)
    host_file = agent.state_dir / "volumes" / data["id"] / "f"

    found = sh(
        plane,
        "other",
        f"cat /mnt/data/f 2>&1; cat {host_file} 2>&1; ls {host_file.parent.parent} 2>&1",
        theirs,  # its own volume at the same path
    )

    lines = found.splitlines()
    assert "No such file" in lines[0]
    assert "Permission denied" in lines[1]
    assert "Permission denied" in lines[2]
    assert "secret" not in found


def test_a_shared_volume_written_through_one_agent_is_read_through_another(
    plane: FakeControlPlane, start_agent: StartAgent, tmp_path: Path
) -> None:
    shared = searchable(tmp_path) / "shared"
    shared.mkdir()
    data = volume("shared")
    data["host_path"] = str(shared / data["id"])
    start_agent()
    sh(plane, "on-a", "echo from-a > /mnt/data/f", data)

    other = FakeControlPlane(plane.node_id)
    other.start()
    (tmp_path / "b").mkdir()
    b = AgentProcess(other, tmp_path / "b").start()  # another node: its own state
    try:
        found = sh(other, "on-b", "cat /mnt/data/f", data)
    finally:
        assert b.process is not None
        b.process.kill()
        b.process.wait(timeout=10)
        other.stop()

    assert found == "from-a\n"


def test_the_heartbeat_reports_what_a_mounted_volume_holds(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    start_agent("--volume-usage-s", "0.2")
    data = volume()
    plane.assign(
        "writer",
        argv=["sh", "-c", "head -c 3000000 /dev/urandom > /mnt/data/blob; echo ok; exec sleep 30"],
        volumes=[data],
    )
    plane.wait_for(lambda: plane.output("writer").startswith(b"ok"))

    def measured() -> int:
        for body in reversed(plane.heartbeats):
            for found in body.get("volumes") or []:
                if found["id"] == data["id"]:
                    return int(found["used_bytes"])
        return 0

    plane.wait_for(lambda: measured() >= 3_000_000)
    assert measured() < 3_200_000
    plane.release("writer")
