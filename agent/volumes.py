"""A run's volumes on this node: their host directories, made on first use, and who may enter.

Each volume's directory is root's, mode 2770, with a group of its own: a gid from the node's
``--volume-gids`` range, local volumes from its first half, shared ones from its second (so a
local and a shared volume never share a group). The gid is the directory's: every later use,
on any node sharing the filesystem, reads it back from the directory. Its parent is 0711 root:
nobody lists the volumes, and a run enters only the directories whose group it was given.

A run gets as supplementary groups the gids of the volumes it mounts, and only those, and the
umask 007: what it writes there (the setgid bit gives it the volume's group) the project's
next runs may read and write, whatever their uid. Another project's run never has the group,
so neither the mount (it is not in its namespace) nor the host path lets it in.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.state import safe_id

MOUNT_ROOT = "/mnt"  # a run's own: the shim mounts a tmpfs there (scheduler.specs' root)
LOCAL = "local"
SHARED = "shared"
DIR_MODE = 0o2770  # setgid: files made inside get the volume's group
PARENT_MODE = 0o711  # traversable, not listable


class VolumeProblem(Exception):
    """Why a volume cannot be mounted; the run is then reported ``start_failed``."""


@dataclass(frozen=True)
class VolumeMount:
    """One volume of an assignment, checked."""

    id: str
    type: str
    host_path: str  # a shared volume's directory, as the control plane sends it
    path: str  # where the run sees it, under MOUNT_ROOT
    read_only: bool = False

    @classmethod
    def parse(cls, data: Any) -> VolumeMount:
        """Raises ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("volumes: an entry is not an object")
        ident, kind = str(data.get("id") or ""), data.get("type")
        path, host_path = str(data.get("path") or ""), str(data.get("host_path") or "")
        if not safe_id(ident):
            raise ValueError(f"volumes: not a usable volume id: {ident!r}")
        if kind not in (LOCAL, SHARED):
            raise ValueError(f"volumes: type {kind!r}")
        if not _normal(path) or not path.startswith(MOUNT_ROOT + "/"):
            raise ValueError(f"volumes: path {path!r} is not a normal path under {MOUNT_ROOT}/")
        if kind == SHARED and not _normal(host_path):
            raise ValueError(f"volumes: shared volume {ident} has no host path: {host_path!r}")
        return cls(ident, str(kind), host_path, path, bool(data.get("read_only")))


@dataclass(frozen=True)
class Mounted:
    """A volume ready to mount: its directory on this host and its group."""

    id: str
    host_dir: str
    path: str
    read_only: bool
    gid: int


def _normal(path: str) -> bool:
    return path.startswith("/") and "\0" not in path and posixpath.normpath(path) == path


def host_dir(mount: VolumeMount, volumes_dir: Path) -> Path:
    """A local volume's directory is under the agent's ``--volumes-dir``, named by its id."""
    return Path(mount.host_path) if mount.type == SHARED else volumes_dir / mount.id


def gid_span(mount: VolumeMount, gids: range) -> range:
    half = len(gids) // 2
    return gids[:half] if mount.type == LOCAL else gids[half:]


def prepare(mount: VolumeMount, *, volumes_dir: Path, gids: range) -> Mounted:
    """Make the volume's directory on its first use (root's, 2770, a group of its own), or
    read its group back; raises VolumeProblem. Root only."""
    directory = host_dir(mount, volumes_dir)
    span = gid_span(mount, gids)
    parent = directory.parent
    try:
        parent.mkdir(mode=PARENT_MODE, parents=True, exist_ok=True)
        os.chown(parent, 0, 0)
        parent.chmod(PARENT_MODE)
        if not directory.exists():
            _create(directory, _free_gid(mount.id, parent, span))
        found = directory.stat()
    except OSError as error:
        raise VolumeProblem(f"volume {mount.id}: {error}") from None
    if found.st_uid != 0 or found.st_gid not in span or found.st_mode & 0o7777 != DIR_MODE:
        raise VolumeProblem(
            f"volume {mount.id}: {directory} is not root's, mode 2770 with a group in {span}"
        )
    return Mounted(mount.id, str(directory), mount.path, mount.read_only, found.st_gid)


def _create(directory: Path, gid: int) -> None:
    """Made aside and renamed in, so another agent sharing the directory never sees it half
    made; where one was faster, its directory stays (renaming onto it fails or replaces an
    empty one just like it)."""
    aside = directory.with_name(f".{directory.name}.{os.getpid()}.new")
    aside.mkdir(mode=0o700)
    os.chown(aside, 0, gid)
    aside.chmod(DIR_MODE)
    try:
        aside.rename(directory)
    except OSError:
        aside.rmdir()


def _free_gid(ident: str, parent: Path, span: range) -> int:
    """The gid a hash of the volume's id names, or the next one no sibling holds."""
    held = {entry.stat().st_gid for entry in parent.iterdir() if entry.is_dir()}
    first = int.from_bytes(hashlib.sha256(ident.encode()).digest()[:8], "big") % len(span)
    for step in range(len(span)):
        gid = span[(first + step) % len(span)]
        if gid not in held:
            return gid
    raise VolumeProblem(f"every volume gid in {span} is in use under {parent}")
