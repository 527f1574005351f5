"""The volumes a workload mounts (``volumes: [{volume, path, read_only}]``): volumes of its
project on the cluster it is queued on, each at its own path under ``VOLUME_MOUNT_ROOT``.

Reads only, no locks: a volume deleted after the check is refused by ``volume_delete`` while
this workload is not finished (the delete asks ``storage.hooks.volume_in_use`` under the
log's lock, which the submission's append takes too).
"""

from __future__ import annotations

import posixpath

from inventory.models import Cluster
from scheduler import events as ev
from scheduler.services.shape import invalid
from scheduler.specs import MAX_PATH_BYTES, MAX_VOLUMES, VOLUME_MOUNT_ROOT, WorkloadSpec
from storage.errors import VolumeFull
from storage.models import VolumeType
from storage.selectors import volumes_active
from tenants.models import Project


def volume_path_problem(path: str) -> str | None:
    """Why a volume cannot be mounted at ``path``, or None: an absolute, normal path (no
    ``..``, no ``//``, no trailing ``/``) inside the run's own ``VOLUME_MOUNT_ROOT``."""
    if len(path.encode()) > MAX_PATH_BYTES or "\0" in path:
        return f"{path!r} is not a path of at most {MAX_PATH_BYTES} bytes"
    if not path.startswith("/") or posixpath.normpath(path) != path:
        return f"{path!r} is not an absolute, normal path"
    if not path.startswith(VOLUME_MOUNT_ROOT + "/"):
        return f"{path!r}: a volume is mounted under {VOLUME_MOUNT_ROOT}/, the run's own"
    return None


def check_volumes(
    spec: WorkloadSpec, project: Project, cluster: Cluster
) -> list[ev.VolumeMountData]:
    """The mounts as the workload's event records them; 400 ``volumes`` when one is not
    the project's on that cluster, has no place, or shares one with another."""
    if not spec.volumes:
        return []
    if len(spec.volumes) > MAX_VOLUMES:
        raise invalid("volumes", f"at most {MAX_VOLUMES} volumes")
    found = volumes_active(m.volume for m in spec.volumes)
    paths: list[str] = []
    for mount in spec.volumes:
        volume = found.get(mount.volume)
        if volume is None or volume.project_id != project.pk:
            raise invalid("volumes", f"no volume {mount.volume} in this project", "unknown")
        if volume.cluster_id != cluster.pk:
            raise invalid(
                "volumes", f"volume {volume.name} is on another cluster than {cluster.slug}"
            )
        if volume.type == VolumeType.LOCAL and spec.nodes > 1:
            raise invalid("volumes", f"local volume {volume.name} is one node's: nodes is 1")
        if volume.used_bytes is not None and volume.used_bytes > volume.size_gb * 10**9:
            raise VolumeFull(
                f"volume {volume.name} holds more than its {volume.size_gb} GB: free some"
                " before new work mounts it",
                fields={"volumes": ["full"]},
            )
        problem = volume_path_problem(mount.path)
        if problem:
            raise invalid("volumes", problem)
        for other in paths:
            if (
                mount.path == other
                or mount.path.startswith(other + "/")
                or other.startswith(mount.path + "/")
            ):
                raise invalid("volumes", f"two volumes on one path: {mount.path}, {other}")
        paths.append(mount.path)
    if len(found) != len(spec.volumes):
        raise invalid("volumes", "a volume is mounted once")
    return [
        ev.VolumeMountData(volume=m.volume, path=m.path, read_only=m.read_only)
        for m in spec.volumes
    ]
