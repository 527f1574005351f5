"""A workload's endpoints: where each of its ports is reached, as the node agents running it
report them. Takes the log's append lock, then the workload's row (``workload_stream``)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler import events as ev
from scheduler.models import Workload
from scheduler.services.workload_stream import append_workload, locked_workload
from tenants.access import Actor


def workload_endpoints_set(
    *, actor: Actor, workload: Workload, endpoints: Sequence[dict[str, object]]
) -> Workload:
    """Record ``endpoints`` (``{port, address, node}``) as the workload's; the same ones
    again record nothing."""
    locked = locked_workload(workload.pk)
    if locked is None:
        return workload
    wanted = [ev.EndpointData.model_validate(e) for e in endpoints]
    if [e.model_dump() for e in wanted] != locked.endpoints:
        append_workload(actor, locked, [ev.WorkloadEndpointsReported(endpoints=wanted)])
    return Workload.objects.get(pk=workload.pk)
