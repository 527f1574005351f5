"""Volume writes: create, place (a local volume, by the first run that mounts it), record
its measured usage, delete.

``volume_create`` takes the log's append lock before the checks that read the organization's
other volumes (its storage quota, the name), so two creations never both fit in the same
quota; no row is locked after it (``neocloud.core.transactions``). ``volume_delete`` asks the
scheduler whether a run still mounts the volume under the same lock, so a submission that
mounts it (which appends, so takes the lock) is either seen or comes after and finds it gone.
"""

from __future__ import annotations

import uuid

from django.conf import settings

from events import store
from events.store import NO_STREAM
from inventory.models import Cluster, Node
from neocloud.core.errors import NotFound, ValidationFailed
from storage import events as ev
from storage import hooks
from storage.errors import NodeDiskFull, StorageQuotaExceeded, VolumeInUse
from storage.models import Volume, VolumeStatus, VolumeType
from storage.selectors import nodes_room_gb, organization_provisioned_gb, shared_path
from tenants.access import Action, Actor
from tenants.errors import PermissionDenied, SlugTaken
from tenants.models import Organization, Project

MAX_VOLUME_GB = 1_000_000
USAGE_CHANGE = 0.01  # a measure this much away from the last recorded one is an event


def _writable(actor: Actor, project: Project) -> Organization:
    organization = Organization.objects.get(pk=project.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    visible = actor.visible_project_ids(organization.pk)
    if visible is not None and project.pk not in visible:
        raise PermissionDenied("not allowed to change this project's volumes")
    return organization


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, fields={field: [message]})


def volume_create(
    *, actor: Actor, project: Project, name: str, size_gb: int, cluster: str, type: str
) -> Volume:
    """A volume of ``size_gb`` provisioned GB. A local one needs a node of the cluster with
    that much room left; a shared one, the cluster's shared filesystem configured. Refused
    past the organization's storage quota (``VOLUME_GB_PER_ORGANIZATION``)."""
    organization = _writable(actor, project)
    if not 1 <= size_gb <= MAX_VOLUME_GB:
        raise _invalid("size_gb", f"a volume is 1 to {MAX_VOLUME_GB} GB")
    if type not in VolumeType.values:
        raise _invalid("type", "a volume is local or shared")
    found = Cluster.objects.filter(slug=cluster).first()
    if found is None:
        raise _invalid("cluster", f"no cluster {cluster!r}")
    if type == VolumeType.SHARED and shared_path(found) is None:
        raise _invalid("type", f"cluster {cluster} has no shared filesystem for volumes")
    volume_id = uuid.uuid4()
    store.take_append_lock()
    if type == VolumeType.LOCAL and max(nodes_room_gb(found.pk).values(), default=0) < size_gb:
        raise NodeDiskFull(
            f"no node of cluster {cluster} has {size_gb} GB of disk left for local volumes",
            fields={"size_gb": ["no node has room"]},
        )
    if Volume.objects.filter(project=project, name=name, status=VolumeStatus.ACTIVE).exists():
        raise SlugTaken(f"project has a volume {name!r}", fields={"name": ["taken"]})
    provisioned = organization_provisioned_gb(organization.pk)
    limit = settings.VOLUME_GB_PER_ORGANIZATION
    if provisioned + size_gb > limit:
        raise StorageQuotaExceeded(
            f"the organization's volumes would provision {provisioned + size_gb} GB,"
            f" past its storage quota of {limit} GB",
            fields={"size_gb": ["past the storage quota"]},
            details={"provisioned_gb": provisioned, "quota_gb": limit},
        )
    store.append(
        ev.VOLUME_STREAM,
        str(volume_id),
        [
            ev.VolumeCreated(
                volume_id=volume_id,
                organization_id=organization.pk,
                project_id=project.pk,
                cluster_id=found.pk,
                name=name,
                type=type,
                size_gb=size_gb,
            )
        ],
        expected_version=NO_STREAM,
        metadata=actor.metadata(organization.pk),
    )
    return Volume.objects.get(pk=volume_id)


def volume_delete(*, actor: Actor, volume: Volume) -> None:
    """Deleted only when no workload that is not finished mounts it (``VolumeInUse``)."""
    organization = _writable(actor, volume.project)
    store.take_append_lock()
    volume = Volume.objects.get(pk=volume.pk)
    if volume.status != VolumeStatus.ACTIVE:
        raise NotFound("no such volume")
    user = hooks.volume_in_use.first(volume.project_id, volume.pk)
    if user is not None:
        raise VolumeInUse(
            f"workload {user!r} mounts volume {volume.name}; delete it when no run uses it",
            details={"workload": user},
        )
    store.append(
        ev.VOLUME_STREAM,
        str(volume.pk),
        [ev.VolumeDeleted()],
        expected_version=volume.version,
        metadata=actor.metadata(organization.pk),
    )


def volume_place(*, volume_id: uuid.UUID, node_id: uuid.UUID) -> None:
    """The first run that mounts a local volume was placed on ``node_id``: its data lives
    there from now on. Called by the scheduler inside the transaction of the grant; a
    volume already placed stays where it is."""
    volume = Volume.objects.filter(pk=volume_id, type=VolumeType.LOCAL, node_id=None).first()
    if volume is None:
        return
    store.append(
        ev.VOLUME_STREAM,
        str(volume.pk),
        [ev.VolumePlaced(node_id=node_id)],
        expected_version=volume.version,
    )


def _usage_changed(volume: Volume, used_bytes: int) -> bool:
    """Worth an event: the first measure, a change past ``USAGE_CHANGE`` (1 %) of the last
    recorded one, or a crossing of the volume's size (either way)."""
    last = volume.used_bytes
    if last is None:
        return True
    size = volume.size_gb * 10**9
    if (last > size) != (used_bytes > size):
        return True
    return abs(used_bytes - last) > USAGE_CHANGE * max(last, 1)


def volumes_usage_record(node: Node, measured: list[tuple[uuid.UUID, int]]) -> None:
    """What ``node``'s agent measured in the volumes its runs mount (the heartbeat, through
    ``inventory.hooks.volumes_measured``). Only a volume of the node's cluster counts, and a
    local one only on the node it is placed on; others are ignored (a deleted volume, an
    agent's stale measure). The row changes only with its event (``_usage_changed``)."""
    wanted = dict(measured)
    volumes = Volume.objects.filter(
        pk__in=list(wanted), cluster_id=node.cluster_id, status=VolumeStatus.ACTIVE
    ).order_by("pk")
    for volume in volumes:
        if volume.type == VolumeType.LOCAL and volume.node_id != node.pk:
            continue
        used_bytes = wanted[volume.pk]
        if not _usage_changed(volume, used_bytes):
            continue
        store.append(
            ev.VOLUME_STREAM,
            str(volume.pk),
            [ev.VolumeUsageMeasured(used_bytes=used_bytes, node_id=node.pk)],
            expected_version=volume.version,
        )
