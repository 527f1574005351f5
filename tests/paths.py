"""Paths a test hands to a root node agent, whose runs are users of their own."""

from __future__ import annotations

import stat
from pathlib import Path


def searchable(path: Path) -> Path:
    """Let other users pass through ``path`` and its parents (pytest's temporary
    directories are 0700), as the agent requires of its state directory's parents."""
    for directory in [path, *path.parents]:
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    return path
