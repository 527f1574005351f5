"""Processes as the kernel knows them: identity by pid *and* start time, process groups.

A pid alone is not an identity: after the run ended the kernel may hand the same number to an
unrelated process, and a restarted agent would then watch (or kill) the wrong one. The start
time (field 22 of ``/proc/<pid>/stat``, in clock ticks since boot) tells them apart.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ProcStat:
    state: str
    start_time: int


def proc_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """The state and start time of ``pid``, or None when there is no such process."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": split after
    # the last ")". What follows starts at field 3 (state); field 22 is 19 further on.
    fields = text.rpartition(")")[2].split()
    return ProcStat(state=fields[0], start_time=int(fields[19]))


def start_time(pid: int, proc: Path = PROC) -> int | None:
    stat = proc_stat(pid, proc)
    return stat.start_time if stat else None


def is_running(pid: int, started: int, proc: Path = PROC) -> bool:
    """Whether the process that had ``pid`` and start time ``started`` is still alive.

    A zombie is not running: it has ended and waits for a parent that may never come (a
    restarted agent is not its parent)."""
    stat = proc_stat(pid, proc)
    return stat is not None and stat.start_time == started and stat.state not in ("Z", "X")


def group_exists(pgid: int) -> bool:
    """Whether any process (zombies included) is still in the process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, signum: signal.Signals) -> bool:
    """Send ``signum`` to the whole group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def become_subreaper() -> bool:
    """Make orphaned descendants (a run's children once its shim died) the agent's children,
    so the agent reaps them and a killed group really disappears. Linux only; best effort."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def reap_children() -> None:
    """Collect every child that ended, so none lingers as a zombie in a run's group."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
