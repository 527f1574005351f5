"""Reads of workloads beyond their row: what a page of them shows (placement, why each waits,
its place in line, when it is expected to start), and a workload's own stream."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from events.models import Event
from scheduler import events as ev
from scheduler.engine.model import Policy, Request
from scheduler.engine.ordering import ordered
from scheduler.models import (
    WAITING_STATUSES,
    Allocation,
    Workload,
    WorkloadEstimate,
    WorkloadWait,
)
from scheduler.selectors.estimates import workload_estimates
from scheduler.selectors.utilisation import Utilisation, workloads_utilisation
from scheduler.snapshot import cluster_policy, cluster_usage, epoch


@dataclass(frozen=True)
class WorkloadState:
    """A workload's state beside its row: the allocation it holds now (and while it runs
    how much of it is used), and while it waits why (as of the last cycle) and its place in
    its cluster's line, in the engine's order (1: the next its scheduler considers), and
    when it is expected to start (as of the last estimate of its cluster)."""

    placement: Allocation | None = None
    pending_reason: WorkloadWait | None = None
    queue_position: int | None = None
    utilisation: Utilisation | None = None
    estimate: WorkloadEstimate | None = None


def workload_states(workloads: Iterable[Workload]) -> dict[uuid.UUID, WorkloadState]:
    """The state of each of ``workloads`` by id: a fixed number of queries however many they
    are (a few more per cluster they wait on)."""
    workloads = list(workloads)
    held = [w.allocation_id for w in workloads if w.allocation_id is not None]
    allocations = {a.pk: a for a in Allocation.objects.filter(pk__in=held)} if held else {}
    waiting = [w for w in workloads if w.status in WAITING_STATUSES]
    waits: dict[uuid.UUID, WorkloadWait] = {}
    positions: dict[uuid.UUID, int] = {}
    if waiting:
        waits = {
            w.workload_id: w
            for w in WorkloadWait.objects.filter(workload_id__in=[w.pk for w in waiting])
        }
        positions = places_in_line({w.cluster_id for w in waiting})
    estimates = workload_estimates(w.pk for w in waiting if not w.cancel_requested)
    utilisations = workloads_utilisation(workloads, allocations)
    return {
        w.pk: WorkloadState(
            placement=allocations.get(w.allocation_id) if w.allocation_id else None,
            pending_reason=waits.get(w.pk),
            queue_position=positions.get(w.pk),
            utilisation=utilisations.get(w.pk),
            estimate=estimates.get(w.pk),
        )
        for w in workloads
    }


def places_in_line(cluster_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, int]:
    """The place (1: first) of every workload waiting on these clusters in the order their
    next cycle considers it: the engine's own order (``engine.ordering.ordered``: effective
    priority with aging, then fair share, then arrival, then id) of the work waiting there
    now, with the policy and the decayed usage a cycle run now would have (read only when
    work of more than one queue waits there). A few queries per cluster, however many
    workloads are asked about; one whose cancel was asked has none."""
    now = timezone.now()
    places: dict[uuid.UUID, int] = {}
    for cluster_id in cluster_ids:
        rows = Workload.objects.filter(
            cluster_id=cluster_id, status__in=WAITING_STATUSES, cancel_requested=False
        ).values_list("id", "project_id", "organization_id", "priority", "submitted_at")
        # Requests of what the order reads (as ``snapshot.request_of`` makes them), no more:
        # the line may be long.
        pending = [
            Request(
                id=str(pk),
                queue=str(project),
                project=str(project),
                organization=str(organization),
                priority=priority,
                submitted_at=epoch(submitted_at),
            )
            for pk, project, organization, priority, submitted_at in rows
        ]
        if len({(r.organization, r.queue) for r in pending}) > 1:
            usage = cluster_usage(cluster_id, settings.SCHEDULER_FAIRSHARE_HALF_LIFE_S, now)
            queues, organizations = usage.as_of(now.timestamp())
            # The fleet only sizes quotas: the order reads the queues' weights.
            policy = replace(
                cluster_policy(cluster_id, ()),
                usage_history=queues,
                organization_usage=organizations,
            )
        else:
            # One queue: fair share ranks it with itself, only aging (as cluster_policy sets
            # it) matters, and the usage and the queues need not be read.
            policy = Policy(aging_step_s=settings.SCHEDULER_AGING_STEP_S)
        for place, request in enumerate(ordered(pending, policy, now.timestamp()), start=1):
            places[uuid.UUID(request.id)] = place
    return places


def ssh_commands(workload: Workload) -> list[str]:
    """The ``ssh`` command to log in to each of the run's sshds (issue 32): through the jump
    host where the operator set ``SSH_JUMP_HOST`` (nodes on a private network)."""
    jump = f"-J {settings.SSH_JUMP_HOST} " if settings.SSH_JUMP_HOST else ""
    commands = []
    for endpoint in workload.endpoints:
        if endpoint.get("kind") == "ssh":
            host = str(endpoint["address"]).rpartition(":")[0]
            commands.append(f"ssh {jump}-p {endpoint['port']} run@{host}")
    return commands


def workload_events(workload: Workload) -> QuerySet[Event]:
    """The workload's own stream, oldest first: submitted, admitted, placed, ran, ended."""
    return Event.objects.filter(
        stream_type=ev.WORKLOAD_STREAM, stream_id=str(workload.pk)
    ).order_by("version")
