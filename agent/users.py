"""Who a run is on the host: a uid of its own, from the operator's range, never root.

Two runs never share a uid while either has a process or a file left: the kernel then keeps
them apart (``/proc/<pid>/environ`` and ptrace need the same uid, signals too, and each run's
files are its own, mode 0600 by its umask). A uid is handed out again only once the run that
had it has ended, every process of that uid is killed and its files in the shared temporary
directories are removed, so nothing of one tenant is left for the next holder.

Only a root agent can give a run another uid: an unprivileged agent's runs are the agent's
own user (the heartbeat says so, and the docs say what that means).
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
SHARED_TMP = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))  # noqa: S108 - swept, not used
_KILL_ROUNDS = 50


def isolating() -> bool:
    """Whether runs get uids of their own: only a root agent can give them."""
    return os.geteuid() == 0


def _real_uid(status: str) -> int | None:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def _processes(proc: Path) -> Iterable[tuple[int, int, str]]:
    """(pid, real uid, state) of every process."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # gone meanwhile
        uid = _real_uid(status)
        state = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("State:")), "")
        if uid is not None:
            yield int(entry.name), uid, state


def busy_uids(proc: Path = PROC) -> set[int]:
    return {uid for _, uid, _ in _processes(proc)}


def free_uid(span: range, taken: set[int], proc: Path = PROC) -> int | None:
    """The lowest uid of ``span`` no run holds and no process has; None when all are."""
    busy = taken | busy_uids(proc)
    return next((uid for uid in span if uid not in busy), None)


def kill_all(uid: int, proc: Path = PROC) -> int:
    """SIGKILL every process of ``uid`` (a run's leftovers, whatever group or session they
    moved to), round after round until none forks any more; how many were signalled."""
    signalled = 0
    for _ in range(_KILL_ROUNDS):
        alive = [pid for pid, owner, state in _processes(proc) if owner == uid and state != "Z"]
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                signalled += 1
            except ProcessLookupError:
                continue
    return signalled


def sweep(uid: int, places: Iterable[Path] = SHARED_TMP) -> int:
    """Remove what ``uid`` left at the top of the shared temporary directories; how many."""
    removed = 0
    for place in places:
        try:
            entries = list(place.iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.lstat().st_uid != uid:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()
                removed += 1
            except OSError:
                continue
    return removed


def give(path: Path, uid: int) -> None:
    """Make ``path`` (a run's own directory) the run's alone."""
    os.chown(path, uid, uid)
    path.chmod(0o700)
