"""Reads: which web endpoints are live, and the endpoint a gateway host names.

An endpoint is one web port (``http_ports``) of one workload; its id is the workload's id
(32 hex digits) and the port, ``<hex>-<port>``, so its URL stays the same across the
workload's runs. It is live while the workload runs and its agent has reported the port: a
release clears the workload's endpoints in the same transaction, so an ended run's endpoint
is not live from that commit on.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from django.conf import settings

from gateway.caddy import Route
from scheduler.models import Workload, WorkloadStatus

ENDPOINT_ID = re.compile(r"^([0-9a-f]{32})-([0-9]{1,5})$")


@dataclass(frozen=True)
class WebEndpoint:
    workload: Workload
    port: int
    upstreams: tuple[str, ...]  # host:port of every node's run serving it

    @property
    def endpoint_id(self) -> str:
        return endpoint_id(self.workload.pk, self.port)


def endpoint_id(workload_id: uuid.UUID, port: int) -> str:
    return f"{workload_id.hex}-{port}"


def endpoint_host(endpoint: str) -> str:
    return f"{endpoint}.{settings.GATEWAY_DOMAIN}"


def endpoint_url(workload_id: uuid.UUID, port: int) -> str | None:
    """Where a web port is reached, or None where no gateway is configured."""
    if not settings.GATEWAY_DOMAIN:
        return None
    return f"{settings.GATEWAY_SCHEME}://{endpoint_host(endpoint_id(workload_id, port))}/"


def endpoint_parse(host: str) -> tuple[uuid.UUID, int] | None:
    """The (workload id, port) a request's host names, or None for any other host."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    suffix = "." + settings.GATEWAY_DOMAIN
    if not settings.GATEWAY_DOMAIN or not name.lower().endswith(suffix):
        return None
    found = ENDPOINT_ID.match(name[: -len(suffix)].lower())
    if found is None:
        return None
    return uuid.UUID(found[1]), int(found[2])


def endpoints_of(workload: Workload) -> list[WebEndpoint]:
    """The workload's live web endpoints (none unless it runs)."""
    if workload.status != WorkloadStatus.RUNNING or workload.allocation_id is None:
        return []
    found = []
    for port in workload.http_ports:
        upstreams = sorted({e["address"] for e in workload.endpoints if e["port"] == port})
        if upstreams:
            found.append(WebEndpoint(workload=workload, port=port, upstreams=tuple(upstreams)))
    return found


def endpoint_live(workload_id: uuid.UUID, port: int) -> WebEndpoint | None:
    workload = Workload.objects.filter(pk=workload_id).first()
    if workload is None:
        return None
    return next((e for e in endpoints_of(workload) if e.port == port), None)


def routes_live() -> list[Route]:
    """A route for every live web endpoint, in a stable order."""
    workloads = (
        Workload.objects.filter(status=WorkloadStatus.RUNNING, allocation_id__isnull=False)
        .exclude(http_ports=[])
        .exclude(endpoints=[])
        .order_by("pk")
    )
    return [route_of(e) for w in workloads for e in endpoints_of(w)]


def route_of(endpoint: WebEndpoint) -> Route:
    return Route(
        endpoint_id=endpoint.endpoint_id,
        host=endpoint_host(endpoint.endpoint_id),
        upstreams=endpoint.upstreams,
    )
