"""cgroup limits for runs (cpu, memory, pids, GPU device files), where the agent may make
cgroups; else none, and why not.

cgroup v2: a run's cgroup is a sibling of the agent's own, ``<agent's cgroup>/run-<id>``.
cgroup v2 lets a cgroup with processes in it enable no controllers for its children, so when
the agent's cgroup holds the agent itself, the agent first moves into a leaf ``agent`` below
it (the pattern systemd's ``Delegate=yes`` expects). GPU device files are fenced by a BPF
device program on the run's cgroup (agent/devices.py).

cgroup v1 (or hybrid): one cgroup per controller, each ``<mount><agent's cgroup>/run-<id>``;
GPU device files are fenced by the ``devices`` controller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent import devices
from agent.devices import Device

MOUNT = Path("/sys/fs/cgroup")
_V2 = ("cpu", "memory", "pids")
_V1 = ("cpu", "memory", "pids", "devices")
_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    """What a run's cgroups hold it to (0: no limit)."""

    cpu_milli: int
    memory_mib: int
    pids_max: int


@dataclass(frozen=True)
class Cgroups:
    """Where run cgroups go (nowhere when ``parents`` is empty) and a note for operators."""

    parents: tuple[Path, ...]
    note: str
    version: int = 0  # 2, 1, or 0 for none
    controllers: tuple[str, ...] = ()  # what the run cgroups limit

    @property
    def available(self) -> bool:
        return bool(self.parents)


def _own_cgroups(proc_self_cgroup: Path) -> dict[str, str]:
    """controller (or "" for v2) -> the agent's cgroup path in that hierarchy."""
    own = {}
    for line in proc_self_cgroup.read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            own[name] = path
    return own


def probe(
    mount: Path = MOUNT,
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
    proc_mounts: Path = Path("/proc/mounts"),
) -> Cgroups:
    """Find (and prepare) the cgroups runs get theirs under: v2, else v1, else none."""
    try:
        own = _own_cgroups(proc_self_cgroup)
    except (OSError, ValueError) as error:
        return Cgroups((), f"cannot read {proc_self_cgroup}: {error}")
    if (mount / "cgroup.controllers").exists():
        return _probe_v2(mount, own)
    return _probe_v1(proc_mounts, own)


def _probe_v2(mount: Path, own: dict[str, str]) -> Cgroups:
    """Whatever of cpu, memory and pids is delegated; even with none, a run's cgroup still
    fences the other GPUs' device files (BPF needs no controller)."""
    if "" not in own:
        return Cgroups((), "the agent is in no cgroup v2 group")
    parent = mount / own[""].lstrip("/")
    try:
        available = (parent / "cgroup.controllers").read_text().split()
    except OSError as error:
        return Cgroups((), f"cannot read {parent}/cgroup.controllers: {error}")
    wanted = [name for name in _V2 if name in available]
    missing = [name for name in _V2 if name not in available]
    try:
        _enable_controllers(parent, wanted)
    except OSError as error:
        return Cgroups((), f"cgroup {parent} not writable by the agent ({error}): no limits")
    note = f"cgroup v2 under {parent} ({' '.join(wanted) or 'no controllers'})"
    if missing:
        note += f"; not delegated, so not limited: {' '.join(missing)}"
    return Cgroups((parent,), note, version=2, controllers=tuple(wanted))


def _v1_mounts(proc_mounts: Path) -> dict[str, Path]:
    found = {}
    for line in proc_mounts.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup":
            for option in fields[3].split(","):
                if option in _V1:
                    found[option] = Path(fields[1])
    return found


def _probe_v1(proc_mounts: Path, own: dict[str, str]) -> Cgroups:
    try:
        mounts = _v1_mounts(proc_mounts)
    except OSError as error:
        return Cgroups((), f"cannot read {proc_mounts}: {error}")
    missing = [name for name in _V1 if name not in mounts or name not in own]
    if missing:
        return Cgroups((), f"no cgroup v2, and cgroup v1 lacks {missing}: no limits")
    parents = tuple(mounts[name] / own[name].lstrip("/") for name in _V1)
    unwritable = [str(path) for path in parents if not os.access(path, os.W_OK)]
    if unwritable:
        return Cgroups((), f"cgroup v1 {unwritable} not writable by the agent: no limits")
    return Cgroups(parents, f"cgroup v1 ({' '.join(_V1)})", version=1, controllers=_V1)


def _enable_controllers(parent: Path, wanted: list[str]) -> None:
    if not wanted:
        return
    control = parent / "cgroup.subtree_control"
    enabled = control.read_text().split()
    if all(name in enabled for name in wanted):
        return
    try:
        control.write_text(" ".join(f"+{name}" for name in wanted))
    except OSError:
        # Busy: processes (the agent) live in parent itself. Move them into a leaf, retry.
        leaf = parent / "agent"
        leaf.mkdir(exist_ok=True)
        for pid in (parent / "cgroup.procs").read_text().split():
            (leaf / "cgroup.procs").write_text(pid)
        control.write_text(" ".join(f"+{name}" for name in wanted))


def cpu_max(cpu_milli: int) -> str:
    """``cpu.max`` for ``cpu_milli`` thousandths of a CPU ("max" when unlimited)."""
    if cpu_milli <= 0:
        return f"max {_PERIOD_US}"
    return f"{cpu_milli * _PERIOD_US // 1000} {_PERIOD_US}"


def memory_max(memory_mib: int) -> str:
    return "max" if memory_mib <= 0 else str(memory_mib * 1024 * 1024)


def _write_if_there(path: Path, value: str) -> None:
    if path.exists():
        path.write_text(value)


def create(cgroups: Cgroups, assignment_id: str, limits: Limits) -> list[Path]:
    """The run's cgroups with their limits; the shim moves itself into each before spawning.
    Raises OSError when one cannot be made or limited (the caller starts nothing then)."""
    paths = [parent / f"run-{assignment_id}" for parent in cgroups.parents]
    for path in paths:
        path.mkdir(exist_ok=True)
    if cgroups.version == 2:
        (path,) = paths
        if "cpu" in cgroups.controllers:
            (path / "cpu.max").write_text(cpu_max(limits.cpu_milli))
        if "memory" in cgroups.controllers:
            (path / "memory.max").write_text(memory_max(limits.memory_mib))
            if limits.memory_mib > 0:
                _write_if_there(path / "memory.swap.max", "0")  # a limit that swaps is none
        if "pids" in cgroups.controllers and limits.pids_max > 0:
            (path / "pids.max").write_text(str(limits.pids_max))
        return paths
    cpu, memory, pids, _ = paths
    if limits.cpu_milli > 0:
        (cpu / "cpu.cfs_period_us").write_text(str(_PERIOD_US))
        (cpu / "cpu.cfs_quota_us").write_text(str(limits.cpu_milli * _PERIOD_US // 1000))
    if limits.memory_mib > 0:
        (memory / "memory.limit_in_bytes").write_text(memory_max(limits.memory_mib))
        _write_if_there(memory / "memory.memsw.limit_in_bytes", memory_max(limits.memory_mib))
    if limits.pids_max > 0:
        (pids / "pids.max").write_text(str(limits.pids_max))
    return paths


def fence_devices(cgroups: Cgroups, paths: list[Path], denied: list[Device]) -> None:
    """Deny the run's cgroup the other GPUs' device files (v1: the devices controller, v2: a
    BPF device program). Raises OSError where the host does not allow it."""
    if not denied:
        return
    if cgroups.version == 2:
        devices.deny_v2(paths[0], denied)
    else:
        devices.deny_v1(paths[_V1.index("devices")], denied)


def oom_killed(paths: list[Path]) -> bool:
    """Whether the kernel's OOM killer killed anything in the run's cgroups (v2's
    ``memory.events``, v1's ``memory.oom_control``)."""
    for path in paths:
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = (path / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
    return False


def remove(paths: list[Path]) -> None:
    """Remove the run's empty cgroups (the kernel refuses while processes remain: kept)."""
    for path in paths:
        try:
            os.rmdir(path)
        except OSError:
            continue
