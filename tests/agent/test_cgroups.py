"""cgroup limits, on directory trees shaped like /sys/fs/cgroup (v2) and its v1 mounts; the
real kernel's cgroups are exercised by the agent's isolation tests."""

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

    (path,) = cgroups.create(found, "a1", cgroups.Limits(1500, 512, 100))

    assert path == mount / "system.slice" / "neocloud-agent.service" / "run-a1"
    assert (path / "cpu.max").read_text() == "150000 100000"
    assert (path / "memory.max").read_text() == str(512 * 1024 * 1024)
    assert (found.parents[0] / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"


def test_cgroup_v1_gets_one_run_cgroup_per_controller(tmp_path: Path) -> None:
    mounts, own = [], []
    for number, name in enumerate(("cpu", "memory", "pids", "devices"), start=1):
        (tmp_path / name / "agent.slice").mkdir(parents=True)
        mounts.append(f"cgroup {tmp_path / name} cgroup rw,relatime,{name} 0 0")
        own.append(f"{number}:{name}:/agent.slice")
    (tmp_path / "mounts").write_text("\n".join(mounts) + "\n")
    (tmp_path / "self-cgroup").write_text("\n".join([*own, "0::/"]) + "\n")

    found = cgroups.probe(tmp_path / "none", tmp_path / "self-cgroup", tmp_path / "mounts")
    cpu, memory, pids, devices = cgroups.create(found, "a1", cgroups.Limits(1500, 512, 100))

    assert (found.version, cpu) == (1, tmp_path / "cpu" / "agent.slice" / "run-a1")
    assert (cpu / "cpu.cfs_quota_us").read_text() == "150000"
    assert (memory / "memory.limit_in_bytes").read_text() == str(512 * 1024 * 1024)
    assert (pids / "pids.max").read_text() == "100"
    assert devices.is_dir()


def test_controllers_not_delegated_are_not_limited_and_the_note_says_so(mount: Path) -> None:
    agent = mount / "system.slice" / "neocloud-agent.service"
    (agent / "cgroup.controllers").write_text("pids\n")

    found = cgroups.probe(mount, mount.parent / "self-cgroup")

    assert found.available  # still a cgroup per run: the GPU device fence needs no controller
    assert found.controllers == ("pids",)
    assert found.note.endswith("not delegated, so not limited: cpu memory")


def test_neither_v2_nor_a_whole_v1_means_no_limits(tmp_path: Path) -> None:
    (tmp_path / "self-cgroup").write_text("4:memory:/\n0::/\n")
    (tmp_path / "mounts").write_text(f"cgroup {tmp_path} cgroup rw,memory 0 0\n")

    found = cgroups.probe(tmp_path, tmp_path / "self-cgroup", tmp_path / "mounts")

    assert (found.available, found.note) == (
        False, "no cgroup v2, and cgroup v1 lacks ['cpu', 'pids', 'devices']: no limits",
    )  # fmt: skip


def test_an_oom_kill_is_read_from_memory_events(tmp_path: Path) -> None:
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroups.oom_killed([tmp_path])
    (tmp_path / "memory.events").write_text("low 0\noom 0\noom_kill 0\n")
    assert not cgroups.oom_killed([tmp_path])
    (tmp_path / "memory.events").unlink()
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cgroups.oom_killed([tmp_path])  # v1


def test_unlimited_is_max() -> None:
    assert (cgroups.cpu_max(0), cgroups.memory_max(0)) == ("max 100000", "max")
