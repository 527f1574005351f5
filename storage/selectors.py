"""Volume reads: a project's volumes by id, and each node's room for local volumes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from django.conf import settings
from django.db.models import Sum

from inventory.models import Cluster, Node
from storage.models import Volume, VolumeStatus, VolumeType

GB = 1_000_000_000
K = TypeVar("K")


def volumes_active(ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Volume]:
    return {v.pk: v for v in Volume.objects.filter(pk__in=list(ids), status=VolumeStatus.ACTIVE)}


def shared_path(cluster: Cluster) -> str | None:
    """Where the cluster's shared filesystem is mounted on every node (``VOLUME_SHARED_PATHS``),
    or None where the operator configured none."""
    return settings.VOLUME_SHARED_PATHS.get(cluster.slug)


def node_disk_gb(node: Node) -> int:
    """The disk its agent offers local volumes (``--volumes-disk-gb``, or the size of the
    filesystem of its volumes directory), as it last reported; 0 when it never did."""
    return int((node.agent_info or {}).get("volumes_disk_gb") or 0)


def nodes_room_gb(cluster_id: uuid.UUID) -> dict[uuid.UUID, int]:
    """Each node's disk for local volumes less what the local volumes placed on it provision."""
    provisioned = dict(
        Volume.objects.filter(
            cluster_id=cluster_id, type=VolumeType.LOCAL, status=VolumeStatus.ACTIVE
        )
        .exclude(node_id=None)
        .values_list("node_id")
        .annotate(gb=Sum("size_gb"))
    )
    return {
        node.pk: node_disk_gb(node) - provisioned.get(node.pk, 0)
        for node in Node.objects.filter(cluster_id=cluster_id).only("id", "agent_info")
    }


def organization_provisioned_gb(organization_id: uuid.UUID) -> int:
    total = Volume.objects.filter(
        organization_id=organization_id, status=VolumeStatus.ACTIVE
    ).aggregate(gb=Sum("size_gb"))["gb"]
    return int(total or 0)


def local_volume_nodes(ids: Iterable[uuid.UUID | str]) -> frozenset[str] | None:
    """The node ids (as the engine names nodes) where work mounting these volumes may run:
    each placed local volume's node, and for one not placed, the nodes with room for it;
    None when none of them is local."""
    allowed: frozenset[str] | None = None
    local = Volume.objects.filter(pk__in=list(ids), type=VolumeType.LOCAL)
    for volume in local:
        if volume.node_id is not None:
            mine = frozenset({str(volume.node_id)})
        else:
            rooms = nodes_room_gb(volume.cluster_id)
            mine = frozenset(str(n) for n, room in rooms.items() if room >= volume.size_gb)
        allowed = mine if allowed is None else allowed & mine
    return allowed


def volume_mounts(mounts: Mapping[K, list[dict[str, Any]]]) -> dict[K, list[dict[str, Any]]]:
    """Per owner (a workload), its mounts as its agent gets them: the volume's id and type,
    the host directory of a shared one (its cluster's shared path, then the volume's id; a
    local one's is the agent's to choose: ""), the path in the run and whether read-only.
    One query for them all."""
    ids = {m["volume"] for listed in mounts.values() for m in listed}
    volumes = Volume.objects.select_related("cluster").in_bulk(list(ids))
    return {
        owner: [_mount(volumes[uuid.UUID(str(m["volume"]))], m) for m in listed]
        for owner, listed in mounts.items()
    }


def _mount(volume: Volume, mount: dict[str, Any]) -> dict[str, Any]:
    root = shared_path(volume.cluster) if volume.type == VolumeType.SHARED else None
    host_path = f"{root}/{volume.pk}" if root else ""  # none: the agent refuses a shared one
    return {
        "id": str(volume.pk),
        "type": volume.type,
        "host_path": host_path,
        "path": mount["path"],
        "read_only": bool(mount.get("read_only")),
    }
