"""cgroup v2 limits for runs, where the agent may make cgroups; else none, and why not.

A run's cgroup is a sibling of the agent's own: ``<agent's cgroup>/run-<assignment>``. cgroup
v2 lets a cgroup with processes in it enable no controllers for its children, so when the
agent's cgroup holds the agent itself, the agent first moves into a leaf ``agent`` below it
(the pattern systemd's ``Delegate=yes`` expects).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNT = Path("/sys/fs/cgroup")
_NEEDED = ("cpu", "memory")
_PERIOD_US = 100_000


@dataclass(frozen=True)
class Cgroups:
    """Where run cgroups go (None: nowhere) and a note for operators and reports."""

    parent: Path | None
    note: str

    @property
    def available(self) -> bool:
        return self.parent is not None


def _own_cgroup(proc_self_cgroup: Path) -> str | None:
    for line in proc_self_cgroup.read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def probe(mount: Path = MOUNT, proc_self_cgroup: Path = Path("/proc/self/cgroup")) -> Cgroups:
    """Find (and prepare) the cgroup v2 directory runs get their cgroups under."""
    if not (mount / "cgroup.controllers").exists():
        return Cgroups(None, f"no cgroup v2 hierarchy at {mount} (v1 or hybrid): no limits")
    try:
        own = _own_cgroup(proc_self_cgroup)
    except OSError as error:
        return Cgroups(None, f"cannot read {proc_self_cgroup}: {error}")
    if own is None:
        return Cgroups(None, "the agent is in no cgroup v2 group")
    parent = mount / own.lstrip("/")
    try:
        available = (parent / "cgroup.controllers").read_text().split()
    except OSError as error:
        return Cgroups(None, f"cannot read {parent}/cgroup.controllers: {error}")
    missing = [name for name in _NEEDED if name not in available]
    if missing:
        return Cgroups(None, f"controllers {missing} not delegated to {parent}: no limits")
    try:
        _enable_controllers(parent)
    except OSError as error:
        return Cgroups(None, f"cgroup {parent} not writable by the agent ({error}): no limits")
    return Cgroups(parent, f"cgroup v2 under {parent}")


def _enable_controllers(parent: Path) -> None:
    control = parent / "cgroup.subtree_control"
    enabled = control.read_text().split()
    if all(name in enabled for name in _NEEDED):
        return
    try:
        control.write_text(" ".join(f"+{name}" for name in _NEEDED))
    except OSError:
        # Busy: processes (the agent) live in parent itself. Move them into a leaf, retry.
        leaf = parent / "agent"
        leaf.mkdir(exist_ok=True)
        for pid in (parent / "cgroup.procs").read_text().split():
            (leaf / "cgroup.procs").write_text(pid)
        control.write_text(" ".join(f"+{name}" for name in _NEEDED))


def cpu_max(cpu_milli: int) -> str:
    """``cpu.max`` for ``cpu_milli`` thousandths of a CPU ("max" when unlimited)."""
    if cpu_milli <= 0:
        return f"max {_PERIOD_US}"
    return f"{cpu_milli * _PERIOD_US // 1000} {_PERIOD_US}"


def memory_max(memory_mib: int) -> str:
    return "max" if memory_mib <= 0 else str(memory_mib * 1024 * 1024)


def create(cgroups: Cgroups, assignment_id: str, *, cpu_milli: int, memory_mib: int) -> Path:
    """The run's cgroup with its limits; the shim moves itself into it before spawning."""
    assert cgroups.parent is not None  # noqa: S101 - callers check `available`
    path = cgroups.parent / f"run-{assignment_id}"
    path.mkdir(exist_ok=True)
    (path / "cpu.max").write_text(cpu_max(cpu_milli))
    (path / "memory.max").write_text(memory_max(memory_mib))
    swap = path / "memory.swap.max"
    if swap.exists() and memory_mib > 0:
        swap.write_text("0")  # a memory limit that swaps instead is no limit
    return path


def oom_killed(path: Path) -> bool:
    """Whether the kernel's OOM killer killed anything in the run's cgroup."""
    try:
        text = (path / "memory.events").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value) > 0
    return False


def remove(path: Path) -> None:
    """Remove an empty run cgroup (the kernel refuses while processes remain: kept then)."""
    try:
        os.rmdir(path)
    except OSError:
        return
