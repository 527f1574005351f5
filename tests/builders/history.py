"""Allocation histories written straight to the log with the scheduler's event types, in the
streams the scheduler uses, at chosen instants (the store's clock is set for each append, so
a preemption's ``recorded_at`` is the instant chosen)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any
from unittest import mock

from events import projections, store
from events.consumers import ProjectionConsumer, consumer_catch_up
from events.store import ANY, Metadata
from events.types import DomainEvent
from scheduler import events as ev
from tenants.models import Project

WHOLE = 1000


@contextmanager
def clock(at: datetime) -> Iterator[None]:
    with mock.patch.object(store, "timezone", SimpleNamespace(now=lambda: at)):
        yield


def catch_up() -> int:
    """Run the usage consumer to the head of the log, as ``events consume`` does."""
    (usage,) = [p for p in projections.asynchronous() if p.name == "metering.usage"]
    return consumer_catch_up(ProjectionConsumer(usage))


@dataclass
class SchedulingLog:
    """Appends one tenant's scheduling events, each at a chosen instant."""

    project: Project
    cluster_id: uuid.UUID

    def _append(self, stream: str, stream_id: uuid.UUID, event: DomainEvent, at: datetime) -> None:
        with clock(at):
            store.append(
                stream,
                str(stream_id),
                [event],
                expected_version=ANY,
                metadata=Metadata(
                    actor="system:tests", organization_id=self.project.organization_id
                ),
            )

    def submit(
        self,
        at: datetime,
        *,
        price_plan: str = "on_demand",
        offering: str | None = None,
        workload_id: uuid.UUID | None = None,
        kind: str = "job",
        name: str = "w",
        preemptible: bool = True,
        retry_limit: int = 0,
        restart_policy: str = "never",
        program: dict[str, Any] | None = None,
        reservation_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """``program``: what it runs (command, image, env, secrets, working_dir, ports)."""
        workload_id = workload_id or uuid.uuid4()
        self._append(
            ev.WORKLOAD_STREAM,
            workload_id,
            ev.WorkloadSubmitted(
                workload_id=workload_id,
                organization_id=self.project.organization_id,
                project_id=self.project.pk,
                cluster_id=self.cluster_id,
                name=name,
                kind=kind,
                gpu_models=["h100"],
                gpus_per_node=1,
                nodes=1,
                min_nodes=None,
                gpu_milli=WHOLE,
                cpu_milli=1000,
                memory_mib=1024,
                priority_class="default",
                priority=0,
                preemptible=preemptible,
                topology="any",
                runtime_estimate_s=None,
                max_runtime_s=None,
                retry_limit=retry_limit,
                restart_policy=restart_policy,
                reservation_id=reservation_id,
                price_plan=price_plan,
                offering=offering,
                order_id=None,
                **(program or {}),
            ),
            at,
        )
        return workload_id

    def grant(
        self,
        workload_id: uuid.UUID,
        at: datetime,
        placements: list[tuple[int, int]],
        gpu_model: str = "h100",
        nodes: list[uuid.UUID] | None = None,
    ) -> uuid.UUID:
        """``placements``: (GPUs, milli of each) per node (``nodes``' ids, else made up)."""
        allocation_id = uuid.uuid4()
        self._append(
            ev.SCHEDULE_STREAM,
            self.cluster_id,
            ev.AllocationGranted(
                allocation_id=allocation_id,
                workload_id=workload_id,
                organization_id=self.project.organization_id,
                project_id=self.project.pk,
                gpu_model=gpu_model,
                placements=[
                    ev.PlacementData(
                        node_id=nodes[i] if nodes else uuid.uuid4(),
                        node=f"n{i}",
                        gpus=list(range(gpus)),
                        gpu_milli=milli,
                        cpu_milli=1000,
                        memory_mib=1024,
                    )
                    for i, (gpus, milli) in enumerate(placements)
                ],
                granted_at=at,
            ),
            at,
        )
        return allocation_id

    def running(self, workload_id: uuid.UUID, allocation_id: uuid.UUID, at: datetime) -> None:
        self._append(
            ev.WORKLOAD_STREAM,
            workload_id,
            ev.WorkloadRunning(allocation_id=allocation_id, started_at=at, details={}),
            at,
        )

    def release(
        self,
        workload_id: uuid.UUID,
        allocation_id: uuid.UUID,
        at: datetime,
        released_at: datetime | None = None,
        *,
        reason: str = "succeeded",
        status: str = "pending",
        ended_at: datetime | None = None,
    ) -> None:
        """A run's end, appended at ``at``, saying it was released at ``released_at``
        (``at``) and ended at ``ended_at`` (a failed node's last heartbeat) when given."""
        self._append(
            ev.WORKLOAD_STREAM,
            workload_id,
            ev.AllocationReleased(
                allocation_id=allocation_id,
                cluster_id=self.cluster_id,
                reason=reason,
                message="",
                status=status,
                released_at=released_at or at,
                ended_at=ended_at,
            ),
            at,
        )

    def preempt(self, workload_id: uuid.UUID, allocation_id: uuid.UUID, at: datetime) -> None:
        self._append(
            ev.SCHEDULE_STREAM,
            self.cluster_id,
            ev.WorkloadPreempted(
                workload_id=workload_id,
                allocation_id=allocation_id,
                by_workload_id=uuid.uuid4(),
                reason="priority",
            ),
            at,
        )


@dataclass
class Log(SchedulingLog):
    """A tenant's jobs as metering sees them."""
