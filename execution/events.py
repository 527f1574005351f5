"""Execution events. Streams:

- ``run/<allocation id>``: the run's assignments, one per placement (``AssignmentsCreated``,
  once: the stream is new when it is appended).
- ``assignment/<id>``: what its node's agent reported, one event per report applied, in
  ``seq`` order.

Nothing here carries a secret's value or the run's environment: the environment is derived
when the agent asks for its assignments, and only that answer holds it. Output is telemetry
(``models.LogChunk``), not events.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from events.types import DomainEvent, event_type

RUN_STREAM = "run"
ASSIGNMENT_STREAM = "assignment"


class AssignmentData(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    assignment_id: UUID
    node_id: UUID
    node: str
    rank: int
    gpus: list[int]


@event_type("execution.AssignmentsCreated")
class AssignmentsCreated(DomainEvent):
    allocation_id: UUID
    workload_id: UUID
    organization_id: UUID
    project_id: UUID
    assignments: list[AssignmentData]


class PortData(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int
    address: str
    kind: str = "port"  # "ssh": the run's sshd (issue 32)


@event_type("execution.AssignmentReported")
class AssignmentReported(DomainEvent):
    """One report of the agent: ``kind`` is started, start_failed, exited or ports."""

    seq: int
    kind: str
    at: datetime
    pid: int | None = None
    container_id: str = ""
    exit_code: int | None = None
    signal: int | None = None
    oom: bool = False
    message: str = ""
    cgroups_applied: bool | None = None
    cgroups_note: str = ""
    ports: list[PortData] = []
