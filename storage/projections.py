"""The volume table, kept from the volume streams inside each append."""

from __future__ import annotations

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from storage import events as ev
from storage.models import Volume, VolumeStatus


class Volumes(projections.Projection):
    name = "storage.volumes"
    models = (Volume,)

    @handles(ev.VolumeCreated)
    def created(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        data["id"] = data.pop("volume_id")
        Volume.objects.create(
            **data,
            status=VolumeStatus.ACTIVE,
            created_at=event.recorded_at,
            version=event.version,
        )

    @handles(ev.VolumePlaced)
    def placed(self, event: RecordedEvent) -> None:
        Volume.objects.filter(id=event.stream_id).update(
            node_id=event.data["node_id"], version=event.version
        )

    @handles(ev.VolumeUsageMeasured)
    def measured(self, event: RecordedEvent) -> None:
        Volume.objects.filter(id=event.stream_id).update(
            used_bytes=event.data["used_bytes"], version=event.version
        )

    @handles(ev.VolumeDeleted)
    def deleted(self, event: RecordedEvent) -> None:
        Volume.objects.filter(id=event.stream_id).update(
            status=VolumeStatus.DELETED, deleted_at=event.recorded_at, version=event.version
        )


projections.register(Volumes(), synchronous=True)
