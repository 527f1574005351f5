"""Where a running workload's ports are reached, as its node agents report them.

Lock: the log's append lock, then the workload's row (``workload_stream.locked_workload``);
the append carries the version read under it. Reports are resent and arrive late: one that
changes nothing appends nothing, and one for a run that has ended (or is not the one asked
about) is dropped, since the release cleared that run's endpoints.
"""

from __future__ import annotations

import uuid

from pydantic import ValidationError

from neocloud.core.errors import ValidationFailed
from scheduler import events as ev
from scheduler import hooks
from scheduler.models import Workload
from scheduler.services.workload_stream import append_workload, locked_workload
from tenants.access import Actor

MAX_PORT = 65_535


def workload_endpoints_set(
    *,
    actor: Actor,
    workload: Workload,
    endpoints: list[dict[str, object]],
    allocation_id: uuid.UUID | None = None,
) -> Workload:
    """Record ``endpoints`` ({port, address, node}) of the workload's current run (of
    ``allocation_id`` when given). Each node named replaces its own endpoints; the other
    nodes' stay, so one node's agent reporting does not erase another's."""
    reported = [_endpoint(item) for item in endpoints]
    locked = locked_workload(workload.pk)
    if locked is None or locked.allocation_id is None:
        return workload
    if allocation_id is not None and str(allocation_id) != str(locked.allocation_id):
        return locked
    nodes = {e.node for e in reported}
    kept = [ev.EndpointData.model_validate(e) for e in locked.endpoints if e["node"] not in nodes]
    merged = sorted({*kept, *reported}, key=lambda e: (e.node, e.port, e.address))
    if [e.model_dump() for e in merged] == locked.endpoints:
        return locked
    append_workload(
        actor,
        locked,
        [ev.WorkloadEndpointsReported(allocation_id=locked.allocation_id, endpoints=merged)],
    )
    hooks.endpoints_changed.on_commit(locked.pk)
    return Workload.objects.get(pk=locked.pk)


def _endpoint(item: dict[str, object]) -> ev.EndpointData:
    try:
        endpoint = ev.EndpointData.model_validate(item, strict=True)
    except ValidationError as exc:
        raise ValidationFailed(
            f"not an endpoint: {item!r}", fields={"endpoints": [str(exc.errors()[0]["msg"])]}
        ) from exc
    if not 1 <= endpoint.port <= MAX_PORT or not endpoint.node or len(endpoint.address) > 300:
        raise ValidationFailed(
            f"not an endpoint: {item!r}",
            fields={"endpoints": [f"port 1-{MAX_PORT}, a node, an address of at most 300"]},
        )
    return endpoint
