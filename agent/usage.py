"""How much the volumes mounted by this node's runs hold, for the control plane.

A shared filesystem without quotas does not stop a volume from growing past its size; the
control plane refuses new work that mounts a volume measured past it. So the agent measures,
like ``du``: a walk of the volume's directory with ``os.scandir`` adding the disk blocks of
each file (a file with several links once), following no symlink. It runs in a thread of its
own, at most every ``--volume-usage-s`` seconds, and the heartbeat sends the last measures.

A pass is bounded, so a volume of millions of files cannot hold the thread: past
``MAX_ENTRIES`` entries or ``MAX_PASS_S`` seconds for one volume, that volume's measure is
dropped for this pass (a partial sum would understate it) and logged; its last complete
measure is kept. On a shared volume mounted by several nodes, each measures and reports it.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

MAX_ENTRIES = 2_000_000  # per volume and pass
MAX_PASS_S = 60.0  # per volume and pass
BLOCK = 512  # st_blocks' unit


class TooLarge(Exception):
    """A walk went past its bound of entries or time."""


def measure(
    directory: str,
    *,
    max_entries: int = MAX_ENTRIES,
    max_s: float = MAX_PASS_S,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """The bytes of disk the files under ``directory`` hold (the directory's own included);
    raises TooLarge past ``max_entries`` entries or ``max_s`` seconds, OSError when the
    directory itself cannot be read. Entries that vanish during the walk are skipped."""
    deadline = clock() + max_s
    seen: set[tuple[int, int]] = set()
    total = os.lstat(directory).st_blocks * BLOCK
    pending, entries = [directory], 0
    while pending:
        try:
            listing = os.scandir(pending.pop())
        except OSError:
            continue  # gone, or not ours to read
        with listing:
            for entry in listing:
                entries += 1
                if entries > max_entries or clock() > deadline:
                    raise TooLarge(f"{directory}: past {max_entries} entries or {max_s:.0f} s")
                try:
                    found = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if found.st_nlink > 1 and not stat.S_ISDIR(found.st_mode):
                    key = (found.st_dev, found.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                total += found.st_blocks * BLOCK
                if stat.S_ISDIR(found.st_mode):
                    pending.append(entry.path)
    return total


class VolumeUsage:
    """The last complete measure of each volume mounted now, by volume id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}

    def measure_pass(self, mounted: Iterable[tuple[str, str]]) -> None:
        """Measure each ``(volume id, host directory)`` once; a volume no longer mounted is
        forgotten."""
        measured: dict[str, int] = {}
        for volume_id, directory in sorted(set(mounted)):
            if volume_id in measured:
                continue
            try:
                measured[volume_id] = measure(directory)
            except TooLarge as error:
                log.warning("volume %s not measured this time: %s", volume_id, error)
                with self._lock:
                    kept = self._used.get(volume_id)
                if kept is not None:
                    measured[volume_id] = kept
            except OSError as error:
                log.warning("volume %s not measured: %s", volume_id, error)
        with self._lock:
            self._used = measured

    def report(self) -> list[dict[str, object]]:
        """The heartbeat's ``volumes``: ``[{id, used_bytes}]``."""
        with self._lock:
            return [{"id": i, "used_bytes": b} for i, b in sorted(self._used.items())]
