"""cgroup v2 limits, on a directory tree shaped like /sys/fs/cgroup."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import cgroups


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    agent = root / "system.slice" / "neocloud-agent.service"
    agent.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (agent / "cgroup.controllers").write_text("cpu io memory pids\n")
    (agent / "cgroup.subtree_control").write_text("\n")
    (tmp_path / "self-cgroup").write_text("0::/system.slice/neocloud-agent.service\n")
    return root


def test_a_delegated_cgroup_gets_run_cgroups_with_their_limits(mount: Path) -> None:
    found = cgroups.probe(mount, mount.parent / "self-cgroup")
    assert found.available

    path = cgroups.create(found, "a1", cpu_milli=1500, memory_mib=512)

    assert path == mount / "system.slice" / "neocloud-agent.service" / "run-a1"
    assert (path / "cpu.max").read_text() == "150000 100000"
    assert (path / "memory.max").read_text() == str(512 * 1024 * 1024)
    assert (found.parent / "cgroup.subtree_control").read_text() == "+cpu +memory"  # type: ignore[operator]


def test_without_controllers_there_are_no_limits_and_the_note_says_why(mount: Path) -> None:
    agent = mount / "system.slice" / "neocloud-agent.service"
    (agent / "cgroup.controllers").write_text("pids\n")

    found = cgroups.probe(mount, mount.parent / "self-cgroup")

    assert not found.available
    assert "not delegated" in found.note


def test_cgroup_v1_means_no_limits(tmp_path: Path) -> None:
    found = cgroups.probe(tmp_path, tmp_path / "self-cgroup")

    assert (found.available, found.note) == (
        False, f"no cgroup v2 hierarchy at {tmp_path} (v1 or hybrid): no limits",
    )  # fmt: skip


def test_an_oom_kill_is_read_from_memory_events(tmp_path: Path) -> None:
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroups.oom_killed(tmp_path)
    (tmp_path / "memory.events").write_text("low 0\noom 0\noom_kill 0\n")
    assert not cgroups.oom_killed(tmp_path)


def test_unlimited_is_max() -> None:
    assert (cgroups.cpu_max(0), cgroups.memory_max(0)) == ("max 100000", "max")
