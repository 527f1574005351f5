from __future__ import annotations

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from gateway import events as ev
from gateway.models import EndpointToken


class Gateway(projections.Projection):
    name = "gateway"
    models = (EndpointToken,)

    @handles(ev.EndpointTokenCreated)
    def token_created(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        EndpointToken.objects.create(
            id=event.stream_id,
            organization_id=data["organization_id"],
            project_id=data["project_id"],
            workload_id=data["workload_id"],
            port=data["port"],
            name=data["name"],
            prefix=data["prefix"],
            token_hash=data["token_hash"],
            created_by=data["created_by"],
            created_at=event.recorded_at,
        )


projections.register(Gateway(), synchronous=True)
