"""Volume events, in the stream ``volume/<id>``: created, placed on a node (a local volume,
by the first run that mounts it), its usage measured (when it changed much), deleted.
Metering reads the provisioned size from them."""

from __future__ import annotations

from uuid import UUID

from events.types import DomainEvent, event_type

VOLUME_STREAM = "volume"


@event_type("storage.VolumeCreated")
class VolumeCreated(DomainEvent):
    volume_id: UUID
    organization_id: UUID
    project_id: UUID
    cluster_id: UUID
    name: str
    type: str
    size_gb: int


@event_type("storage.VolumePlaced")
class VolumePlaced(DomainEvent):
    """A local volume's data now lives on ``node_id``: work that mounts it goes there."""

    node_id: UUID


@event_type("storage.VolumeUsageMeasured")
class VolumeUsageMeasured(DomainEvent):
    """An agent measured what the volume holds. Recorded only when it differs from the last
    recorded measure by more than 1 % or crosses the volume's size, so
    the log grows with the volume's changes, not with every heartbeat."""

    used_bytes: int
    node_id: UUID


@event_type("storage.VolumeDeleted")
class VolumeDeleted(DomainEvent):
    """Deleted with no run using it; its provisioned size stops being metered."""
