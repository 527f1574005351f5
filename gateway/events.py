"""The gateway's events, in the ``endpoint-token/<id>`` stream: a token for programs to
reach one web port of one workload. Only the token's hash enters the log."""

from __future__ import annotations

from uuid import UUID

from events.types import DomainEvent, event_type

ENDPOINT_TOKEN_STREAM = "endpoint-token"  # noqa: S105 - a stream name


@event_type("gateway.EndpointTokenCreated")
class EndpointTokenCreated(DomainEvent):
    """A token that opens web port ``port`` of workload ``workload_id`` (any of its runs)."""

    organization_id: UUID
    project_id: UUID
    workload_id: UUID
    port: int
    name: str
    prefix: str
    token_hash: str
    created_by: UUID | None
