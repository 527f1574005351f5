"""The engine's view of one cluster, read from the tables: nodes, running work, waiting work,
policy and the decayed usage fair share orders by. The tables are projections of the log, so
what is read here at log position P is what a replay of the log up to P gives.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from inventory.lifecycle import NodeState
from inventory.selectors import nodes_in_service
from scheduler import events as ev
from scheduler.engine.cycle import Scheduler
from scheduler.engine.fairshare import FairShareUsage
from scheduler.engine.model import (
    Allocation,
    Node,
    PendingReason,
    Placement,
    Policy,
    QueueConfig,
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    Topology,
)
from scheduler.models import (
    FINAL_STATUSES,
    WAITING_STATUSES,
    Queue,
    ReservationStatus,
    Workload,
    WorkloadStatus,
)
from scheduler.models import Allocation as AllocationRow
from scheduler.models import Reservation as ReservationRow
from storage import selectors as storage_selectors
from tenants.models import Quota

FAULT_PREFIX = "fault:"  # allocations that stand for faulty GPUs: never free, never preempted
# Allocations that ended this many half-lives ago count for less than 0.1 % of their usage:
# older ones are not read.
USAGE_HORIZON_HALF_LIVES = 10


def epoch(moment: datetime | str | None) -> float:
    if moment is None:
        return 0.0
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.timestamp()


def request_of(data: Mapping[str, Any]) -> Request:
    """A workload as the engine sees it, from its row or its ``WorkloadSubmitted`` data."""
    reservation = data.get("reservation_id")
    return Request(
        id=str(data.get("workload_id") or data["id"]),
        queue=str(data["project_id"]),
        gpus_per_node=data["gpus_per_node"],
        nodes=data["nodes"],
        min_nodes=data["min_nodes"],
        gpu_milli=data["gpu_milli"],
        cpu_milli=data["cpu_milli"],
        memory_mib=data["memory_mib"],
        gpu_models=tuple(data["gpu_models"]),
        priority=data["priority"],
        preemptible=data["preemptible"],
        topology=Topology(data["topology"]),
        reservation=str(reservation) if reservation else None,
        runtime_estimate_s=data["runtime_estimate_s"],
        organization=str(data["organization_id"]),
        project=str(data["project_id"]),
        submitted_at=epoch(data["submitted_at"]),
        nodes_allowed=local_volume_nodes(data.get("volumes") or ()),
    )


def local_volume_nodes(mounts: Iterable[Mapping[str, Any]]) -> frozenset[str] | None:
    """The nodes work mounting these volumes may go to (issue 32): where its local volumes'
    data lives, or, for one not placed yet, the nodes with room for it; None when it mounts
    no local volume (one read, and only for work that mounts volumes)."""
    ids = [m["volume"] for m in mounts]
    if not ids:
        return None
    return storage_selectors.local_volume_nodes(ids)


def allocation_of(
    request: Request,
    gpu_model: str | None,
    placements: Iterable[Mapping[str, Any]],
    granted_at: float,
) -> Allocation:
    runtime = request.runtime_estimate_s
    return Allocation(
        workload=request.id,
        queue=request.queue,
        gpu_model=gpu_model or None,
        placements=tuple(
            Placement(
                node=str(p["node_id"]),
                gpus=tuple(p["gpus"]),
                gpu_milli=p["gpu_milli"],
                cpu_milli=p["cpu_milli"],
                memory_mib=p["memory_mib"],
            )
            for p in placements
        ),
        priority=request.priority,
        preemptible=request.preemptible,
        organization=request.organization,
        started_at=granted_at,
        ends_at=None if runtime is None else granted_at + runtime,
        reservation=request.reservation,
    )


@dataclass
class ClusterView:
    nodes: tuple[Node, ...]
    node_names: dict[str, str]  # node id -> name
    faults: tuple[Allocation, ...]
    running: dict[str, tuple[uuid.UUID, Allocation]]  # workload -> (allocation id, allocation)
    requests: dict[str, Request]  # every workload waiting or holding GPUs
    waiting: dict[str, bool]  # waiting workload -> already admitted
    policy: Policy
    # What the engine's requests do not carry, for the runtimes forecasts learn: workload ->
    # (its job array, its maximum runtime in seconds)
    arrays_and_limits: dict[str, tuple[str | None, float | None]]


def snapshot_of(view: ClusterView) -> Snapshot:
    """The view's nodes and what they hold: its running work and its faulty GPUs."""
    return Snapshot(view.nodes, view.faults + tuple(a for _, a in view.running.values()))


def engine_of(view: ClusterView) -> Scheduler:
    """The engine holding what the view has running, faulty GPUs included."""
    return Scheduler(snapshot_of(view), view.policy)


def waiting_of(view: ClusterView) -> list[Request]:
    """The view's waiting work, in the order a cycle is given it."""
    return [view.requests[w] for w in sorted(view.waiting)]


def placements_of(view: ClusterView, allocation: Allocation) -> list[ev.PlacementData]:
    """An allocation's nodes and GPUs in the log's words."""
    return [
        ev.PlacementData(
            node_id=uuid.UUID(p.node),
            node=view.node_names.get(p.node, p.node),
            gpus=list(p.gpus),
            gpu_milli=p.gpu_milli,
            cpu_milli=p.cpu_milli,
            memory_mib=p.memory_mib,
        )
        for p in allocation.placements
    ]


MAX_REASON_MESSAGE = 500  # ``WorkloadWait.message``


def reason_shown(
    reason: PendingReason, node_names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pending reason as a workload's ``WorkloadWait`` keeps it (and the API shows it). The
    engine names nodes by id; a person reads their names (``volume_locality``'s nodes)."""
    message = reason.message
    if reason.code is ReasonCode.VOLUME_LOCALITY and node_names:
        for node in cast(list[str], reason.figures.get("nodes") or []):
            message = message.replace(str(node), node_names.get(str(node), str(node)))
    return {
        "code": reason.code.value,
        "message": message[:MAX_REASON_MESSAGE],
        "figures": _plain(reason.figures),
    }


def _plain(figures: object) -> object:
    """Figures as JSON can hold them."""
    if isinstance(figures, dict):
        return {str(k): _plain(v) for k, v in figures.items()}
    if isinstance(figures, list | tuple | set | frozenset):
        return [_plain(v) for v in figures]
    if isinstance(figures, str | int | float | bool) or figures is None:
        return figures
    return str(figures)


def cluster_view(cluster_id: uuid.UUID) -> ClusterView:
    nodes, names, faults = _nodes(cluster_id)
    requests: dict[str, Request] = {}
    waiting: dict[str, bool] = {}
    arrays_and_limits: dict[str, tuple[str | None, float | None]] = {}
    live = list(
        AllocationRow.objects.filter(cluster_id=cluster_id, released_at__isnull=True).values(
            "id", "workload_id", "gpu_model", "placements", "granted_at"
        )
    )
    # Waiting work, and every workload holding GPUs: even one that ended meanwhile holds
    # them until its run gives them back, and they must not look free.
    holders = [a["workload_id"] for a in live]
    rows = Workload.objects.filter(
        Q(cluster_id=cluster_id, status__in=list(WAITING_STATUSES)) | Q(id__in=holders)
    )
    for row in rows.values():
        request = request_of(row)
        requests[request.id] = request
        array = row["array_id"]
        arrays_and_limits[request.id] = (str(array) if array else None, row["max_runtime_s"])
        if row["status"] in WAITING_STATUSES and not row["cancel_requested"]:
            waiting[request.id] = row["status"] == WorkloadStatus.ADMITTED
    running: dict[str, tuple[uuid.UUID, Allocation]] = {}
    for allocation in live:
        request = requests[str(allocation["workload_id"])]
        running[request.id] = (
            allocation["id"],
            allocation_of(
                request,
                allocation["gpu_model"],
                allocation["placements"],
                epoch(allocation["granted_at"]),
            ),
        )
    return ClusterView(
        nodes=nodes,
        node_names=names,
        faults=faults,
        running=running,
        requests=requests,
        waiting=waiting,
        policy=cluster_policy(cluster_id, nodes),
        arrays_and_limits=arrays_and_limits,
    )


def cluster_usage(cluster_id: uuid.UUID, half_life_s: float, now: datetime) -> FairShareUsage:
    """The decayed usage of the cluster's queues and organizations, from its allocations
    (the grants and releases of the log) up to ``now``."""
    usage = FairShareUsage(half_life_s)
    if half_life_s <= 0:
        return usage
    horizon = now - timedelta(seconds=half_life_s * USAGE_HORIZON_HALF_LIVES)
    rows = (
        AllocationRow.objects.filter(cluster_id=cluster_id)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=horizon))
        .values_list("project_id", "organization_id", "gpu_milli", "granted_at", "released_at")
    )
    for project_id, organization_id, milli, granted_at, released_at in rows.iterator():
        queue, organization = str(project_id), str(organization_id)
        usage.start(queue, organization, milli, epoch(granted_at))
        if released_at is not None:
            usage.stop(queue, organization, milli, epoch(released_at))
    return usage


def _nodes(
    cluster_id: uuid.UUID,
) -> tuple[tuple[Node, ...], dict[str, str], tuple[Allocation, ...]]:
    nodes: list[Node] = []
    names: dict[str, str] = {}
    faults: list[Allocation] = []
    rows = (
        nodes_in_service()
        .filter(cluster_id=cluster_id)
        .select_related("gpu_model")
        .prefetch_related("gpus")
        .order_by("name")
    )
    for row in rows:
        gpus = sorted(row.gpus.all(), key=lambda g: g.index)
        node_id = str(row.pk)
        names[node_id] = row.name
        nodes.append(
            Node(
                name=node_id,
                gpu_model=row.gpu_model_id,
                gpu_domains=tuple(g.nvlink_domain for g in gpus),
                cpu_milli=row.cpu_milli,
                memory_mib=row.memory_mib,
                rack=str(row.rack_id or ""),
                schedulable=row.state == NodeState.READY,
                shareable=bool(row.gpu_model and row.gpu_model.shareable),
            )
        )
        faulty = tuple(g.index for g in gpus if not g.healthy)
        if faulty:
            faults.append(
                Allocation(
                    workload=f"{FAULT_PREFIX}{node_id}",
                    queue="",
                    gpu_model=row.gpu_model_id,
                    placements=(Placement(node_id, faulty, 1000, 0, 0),),
                )
            )
    return tuple(nodes), names, tuple(faults)


def cluster_policy(cluster_id: uuid.UUID, nodes: Iterable[Node]) -> Policy:
    """Queues of every project with a queue or with work here and a quota: nominal quota per
    model is the project's quota, else its organization's, else all the cluster has. A
    project without any quota is left out: the engine does not limit it. An organization's
    own quota also caps the sum over all of its projects (``Policy.organizations``): inherited
    by each, it is not multiplied by their number."""
    fleet: dict[str, int] = {}
    for node in nodes:
        if node.gpu_model:
            fleet[node.gpu_model] = fleet.get(node.gpu_model, 0) + node.gpu_count
    projects = dict(
        Workload.objects.filter(cluster_id=cluster_id)
        .exclude(status__in=FINAL_STATUSES)
        .values_list("project_id", "organization_id")
        .distinct()
    )
    configured = {q.project_id: q for q in Queue.objects.all()}
    for project_id, configured_queue in configured.items():
        projects.setdefault(project_id, configured_queue.organization_id)
    limits: dict[tuple[uuid.UUID, uuid.UUID | None], dict[str, int]] = {}
    for quota in Quota.objects.filter(organization_id__in=set(projects.values())):
        limits.setdefault((quota.organization_id, quota.project_id), {})[quota.gpu_model] = (
            quota.max_gpus
        )
    organizations = {
        str(organization_id): dict(models)
        for (organization_id, project_id), models in limits.items()
        if project_id is None
    }
    queues: dict[str, QueueConfig] = {}
    for project_id, organization_id in projects.items():
        own = limits.get((organization_id, project_id), {})
        inherited = limits.get((organization_id, None), {})
        if not own and not inherited:
            continue  # no quota: not limited (and lends nothing)
        nominal = {
            model: own.get(model, inherited.get(model, total)) for model, total in fleet.items()
        }
        queue = configured.get(project_id)
        queues[str(project_id)] = QueueConfig(
            name=str(project_id),
            cohort=queue.cohort if queue else f"org-{organization_id}",
            nominal=nominal,
            borrowing_limit=queue.borrowing_limit if queue else None,
            lending_limit=queue.lending_limit if queue else None,
            weight=queue.weight if queue else 1.0,
            organization=str(organization_id),
        )
    now = timezone.now()
    reservations = tuple(
        Reservation(
            id=str(r.pk),
            queue=str(r.project_id),
            gpu_model=r.gpu_model,
            gpus=r.gpus,
            starts_at=epoch(r.starts_at),
            ends_at=epoch(r.ends_at),
        )
        for r in ReservationRow.objects.filter(
            cluster_id=cluster_id, status=ReservationStatus.ACTIVE, ends_at__gt=now
        ).order_by("starts_at", "id")
    )
    return Policy(
        queues=queues,
        organizations=organizations,
        reservations=reservations,
        aging_step_s=settings.SCHEDULER_AGING_STEP_S,
    )
