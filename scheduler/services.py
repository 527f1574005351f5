"""Scheduling writes: policy (priority classes, queues), workloads and reservations, and the
ends of runs. Each workload write locks the workload's row and appends to its stream with the
version it read; the scheduling service (``scheduling``) is told on commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from events import store
from events.store import NO_STREAM
from events.types import DomainEvent
from inventory.models import Cluster, GpuModel, Node
from neocloud.errors import ValidationFailed
from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.errors import QuotaExceeded, ReservationConflict, Unschedulable, WorkloadFinished
from scheduler.models import (
    FINAL_STATUSES,
    Allocation,
    PriorityClass,
    Queue,
    Reservation,
    ReservationStatus,
    Workload,
    WorkloadStatus,
)
from scheduler.specs import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MAX_NODES,
    MAX_RETRY_LIMIT,
    MAX_RUNTIME_S,
    RESERVATION_HORIZON,
    RESERVATION_START_TOLERANCE,
    RestartPolicy,
    WorkloadKind,
    WorkloadSpec,
)
from tenants.access import Action, Actor
from tenants.errors import PermissionDenied
from tenants.models import Organization, Project, Quota

# Used when operators have defined none of that name.
BUILTIN_PRIORITY_CLASSES: dict[str, tuple[int, bool]] = {
    "low": (0, True),
    "standard": (100, False),
    "high": (200, False),
    "production": (1000, False),
}
TOPOLOGIES = ("any", "single_node", "same_nvlink_domain", "same_rack")


def _require_operator(actor: Actor) -> None:
    if not actor.is_staff:
        raise PermissionDenied("only operators change scheduling policy")


# --- policy ----------------------------------------------------------------------------------


def priority_class_define(
    *, actor: Actor, name: str, value: int, preemptible: bool = False, description: str = ""
) -> PriorityClass:
    _require_operator(actor)
    store.append(
        ev.PRIORITY_CLASS_STREAM,
        name,
        [
            ev.PriorityClassDefined(
                name=name, value=value, preemptible=preemptible, description=description
            )
        ],
        expected_version=store.stream_version(ev.PRIORITY_CLASS_STREAM, name),
        metadata=actor.metadata(),
    )
    return PriorityClass.objects.get(name=name)


def priority_of(name: str) -> tuple[int, bool]:
    """A class's value and whether its work is preemptible by default."""
    defined = PriorityClass.objects.filter(name=name).first()
    if defined is not None:
        return defined.value, defined.preemptible
    if name in BUILTIN_PRIORITY_CLASSES:
        return BUILTIN_PRIORITY_CLASSES[name]
    raise ValidationFailed(
        f"unknown priority class {name!r}", fields={"priority_class": ["unknown"]}
    )


def queue_configure(
    *,
    actor: Actor,
    project: Project,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    weight: float = 1.0,
) -> Queue:
    """Set a project's queue terms. Its nominal quota is the project's quota; ``cohort``
    defaults to the organization, so its projects lend each other idle quota."""
    _require_operator(actor)
    if weight <= 0:
        raise ValidationFailed("weight must be positive", fields={"weight": ["not_positive"]})
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=project.pk)
        store.append(
            ev.QUEUE_STREAM,
            str(project.pk),
            [
                ev.QueueConfigured(
                    project_id=project.pk,
                    organization_id=project.organization_id,
                    cohort=cohort if cohort is not None else _default_cohort(project),
                    borrowing_limit=borrowing_limit,
                    lending_limit=lending_limit,
                    weight=weight,
                )
            ],
            expected_version=store.stream_version(ev.QUEUE_STREAM, str(project.pk)),
            metadata=actor.metadata(project.organization_id),
        )
        triggers.policy_changed()
    return Queue.objects.get(pk=project.pk)


def _default_cohort(project: Project) -> str:
    return f"org-{project.organization_id}"


# --- workloads -------------------------------------------------------------------------------


def workload_submit(
    *,
    actor: Actor,
    project: Project,
    spec: WorkloadSpec,
    order_id: uuid.UUID | None = None,
) -> Workload:
    """Validate ``spec`` against the fleet and the quota, and queue it on a cluster."""
    organization = Organization.objects.get(pk=project.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    visible = actor.visible_project_ids(organization.pk)
    if visible is not None and project.pk not in visible:
        raise PermissionDenied("not allowed to submit to this project")
    _check_shape(spec)
    priority, class_preemptible = priority_of(spec.priority_class)
    cluster = _cluster_for(spec)
    _check_fits(spec, cluster)
    _check_quota(project, spec)
    _check_reservation(project, spec, cluster)
    workload_id = uuid.uuid4()
    with transaction.atomic():
        store.append(
            ev.WORKLOAD_STREAM,
            str(workload_id),
            [
                ev.WorkloadSubmitted(
                    workload_id=workload_id,
                    organization_id=organization.pk,
                    project_id=project.pk,
                    cluster_id=cluster.pk,
                    name=spec.name,
                    kind=spec.kind.value,
                    gpu_models=list(spec.gpu_models),
                    gpus_per_node=spec.gpus_per_node,
                    nodes=spec.nodes,
                    min_nodes=spec.min_nodes,
                    gpu_milli=spec.gpu_milli,
                    cpu_milli=spec.cpu_milli,
                    memory_mib=spec.memory_mib,
                    priority_class=spec.priority_class,
                    priority=priority,
                    preemptible=spec.preemptible or class_preemptible,
                    topology=spec.topology,
                    runtime_estimate_s=spec.runtime_estimate_s,
                    max_runtime_s=spec.max_runtime_s,
                    retry_limit=spec.retry_limit,
                    restart_policy=spec.restart_policy.value,
                    reservation_id=spec.reservation,
                    price_plan=spec.price_plan.value,
                    offering=spec.offering,
                    order_id=order_id,
                )
            ],
            expected_version=NO_STREAM,
            metadata=actor.metadata(organization.pk),
        )
        triggers.cycle_wanted(cluster.pk)
    return Workload.objects.get(pk=workload_id)


def _invalid(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(message, fields={field: [code]})


def _check_shape(spec: WorkloadSpec) -> None:
    if not spec.name.strip():
        raise _invalid("name", "a workload needs a name", "required")
    if not 1 <= spec.gpus_per_node <= MAX_GPUS_PER_NODE:
        raise _invalid("gpus_per_node", f"gpus_per_node must be between 1 and {MAX_GPUS_PER_NODE}")
    if not 1 <= spec.nodes <= MAX_NODES:
        raise _invalid("nodes", f"nodes must be between 1 and {MAX_NODES}")
    if spec.min_nodes is not None and not 1 <= spec.min_nodes <= spec.nodes:
        raise _invalid("min_nodes", "min_nodes must be between 1 and nodes")
    if not 1 <= spec.gpu_milli <= 1000:
        raise _invalid("gpu_milli", "gpu_milli must be between 1 and 1000")
    if spec.gpu_milli < 1000 and (spec.gpus_per_node != 1 or spec.nodes != 1):
        raise _invalid("gpu_milli", "a fraction of a GPU is asked for one GPU on one node")
    if spec.topology not in TOPOLOGIES:
        raise _invalid("topology", f"topology must be one of {', '.join(TOPOLOGIES)}")
    if spec.topology == "single_node" and spec.nodes != 1:
        raise _invalid("topology", "a single_node workload has nodes = 1")
    for name in ("runtime_estimate_s", "max_runtime_s"):
        value = getattr(spec, name)
        if value is not None and not 0 < value <= MAX_RUNTIME_S:
            raise _invalid(name, f"{name} must be positive and at most {MAX_RUNTIME_S} s")
    if not 0 <= spec.cpu_milli <= MAX_CPU_MILLI:
        raise _invalid("cpu_milli", f"cpu_milli must be between 0 and {MAX_CPU_MILLI}")
    if not 0 <= spec.memory_mib <= MAX_MEMORY_MIB:
        raise _invalid("memory_mib", f"memory_mib must be between 0 and {MAX_MEMORY_MIB}")
    if not 0 <= spec.retry_limit <= MAX_RETRY_LIMIT:
        raise _invalid("retry_limit", f"retry_limit must be between 0 and {MAX_RETRY_LIMIT}")
    if spec.kind is WorkloadKind.JOB and spec.restart_policy is RestartPolicy.ALWAYS:
        raise _invalid("restart_policy", "a job is retried by retry_limit, not restarted always")
    unknown = set(spec.gpu_models) - set(
        GpuModel.objects.filter(slug__in=spec.gpu_models).values_list("slug", flat=True)
    )
    if unknown:
        raise _invalid("gpu_models", f"unknown GPU models: {', '.join(sorted(unknown))}", "unknown")
    if spec.gpu_milli < 1000:
        shareable = GpuModel.objects.filter(shareable=True)
        if spec.gpu_models:
            shareable = shareable.filter(slug__in=spec.gpu_models)
        if not shareable.exists():
            raise _invalid("gpu_milli", "none of these GPU models can be shared", "not_shareable")


def _cluster_for(spec: WorkloadSpec) -> Cluster:
    """The cluster asked for, else the one of the region (any region) with the most GPUs of
    the requested models."""
    if spec.cluster is not None:
        cluster = Cluster.objects.filter(pk=spec.cluster).first()
        if cluster is None:
            raise _invalid("cluster", "no such cluster", "unknown")
        return cluster
    nodes = Node.objects.exclude(state__in=["decommissioned", "decommissioning"])
    if spec.gpu_models:
        nodes = nodes.filter(gpu_model__in=spec.gpu_models)
    else:
        nodes = nodes.filter(gpu_model__isnull=False)
    if spec.region:
        nodes = nodes.filter(cluster__region_id=spec.region)
    best = (
        nodes.values("cluster_id")
        .annotate(gpu_total=Count("gpus"))
        .order_by("-gpu_total", "cluster_id")
        .first()
    )
    if best is None:
        where = f" in region {spec.region}" if spec.region else ""
        raise Unschedulable(
            f"no cluster{where} has {' or '.join(spec.gpu_models) or 'GPU'} nodes",
            fields={"gpu_models": ["unavailable"]},
        )
    return Cluster.objects.get(pk=best["cluster_id"])


def _check_fits(spec: WorkloadSpec, cluster: Cluster) -> None:
    """Refuse what no node of the cluster could ever hold: it would wait forever."""
    nodes = Node.objects.filter(cluster=cluster, gpu_model__isnull=False).exclude(
        state__in=["decommissioned", "decommissioning"]
    )
    if spec.gpu_models:
        nodes = nodes.filter(gpu_model__in=spec.gpu_models)
    sized = nodes.annotate(gpu_count=Count("gpus"))
    fitting = sized.filter(
        gpu_count__gte=spec.gpus_per_node,
        cpu_milli__gte=spec.cpu_milli,
        memory_mib__gte=spec.memory_mib,
    ).count()
    needed = spec.min_nodes or spec.nodes
    if fitting < needed:
        largest = max(sized.values_list("gpu_count", flat=True), default=0)
        raise Unschedulable(
            f"cluster {cluster.slug} has {fitting} nodes able to hold"
            f" {spec.gpus_per_node} GPUs with the CPU and memory asked (largest node:"
            f" {largest} GPUs); the workload needs {needed}",
            fields={"gpus_per_node": ["too_large"]},
        )


def _check_quota(project: Project, spec: WorkloadSpec) -> None:
    """A workload larger than the project's (or organization's) quota could never start."""
    demand = spec.gpus_per_node * (spec.min_nodes or spec.nodes) * spec.gpu_milli / 1000
    for model in spec.gpu_models:
        limit = quota_limit(project, model)
        if limit is None or demand <= limit:
            return
    if not spec.gpu_models:
        return
    raise QuotaExceeded(
        f"asks {demand:g} GPUs; the quota allows {quota_limit(project, spec.gpu_models[0])}"
        f" {spec.gpu_models[0]}",
        fields={"gpus_per_node": ["quota_exceeded"]},
        details={"needed": demand},
    )


def quota_limit(project: Project, gpu_model: str) -> int | None:
    """The project's quota of ``gpu_model``, else its organization's; None: no limit."""
    quotas = {
        q.project_id: q.max_gpus
        for q in Quota.objects.filter(organization_id=project.organization_id, gpu_model=gpu_model)
    }
    return quotas.get(project.pk, quotas.get(None))


def _check_reservation(project: Project, spec: WorkloadSpec, cluster: Cluster) -> None:
    if spec.reservation is None:
        return
    reservation = Reservation.objects.filter(
        pk=spec.reservation, project=project, status=ReservationStatus.ACTIVE
    ).first()
    if reservation is None:
        raise _invalid("reservation", "no such active reservation in this project", "unknown")
    if reservation.cluster_id != cluster.pk or (
        spec.gpu_models and reservation.gpu_model not in spec.gpu_models
    ):
        raise _invalid("reservation", "the reservation holds other GPUs", "mismatch")


def workload_cancel(*, actor: Actor, workload: Workload, reason: str = "") -> Workload:
    """Cancel: a waiting workload at once; a holding one releases its GPUs (its run is
    stopped once this commits)."""
    organization = Organization.objects.get(pk=workload.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    reason = reason or f"cancelled by {actor.label}"
    with transaction.atomic():
        locked = _locked(workload.pk)
        if locked is None:
            raise WorkloadFinished("no such workload")
        workload = locked
        if workload.status in FINAL_STATUSES:
            if workload.status == WorkloadStatus.CANCELLED:
                return workload
            raise WorkloadFinished(f"workload already {workload.status}")
        changes: list[DomainEvent] = [
            ev.WorkloadCancelRequested(cluster_id=workload.cluster_id, reason=reason)
        ]
        if workload.allocation_id is not None:
            changes.append(_released(workload, "cancelled", reason, WorkloadStatus.CANCELLED))
            triggers.run_stop(workload.pk, workload.allocation_id)
        else:
            changes.append(ev.WorkloadCancelled(cluster_id=workload.cluster_id, reason=reason))
        _append_workload(actor, workload, changes)
        triggers.cycle_wanted(workload.cluster_id)
        ended = Workload.objects.get(pk=workload.pk)
        hooks.workload_ended(ended)
    return ended


def _locked(workload_id: uuid.UUID) -> Workload | None:
    """The workload's row, locked to the end of the transaction, after the log's lock: a
    cycle's append holds the log's lock and then updates workload rows, so taking them in the
    other order could deadlock with it."""
    store.take_append_lock()
    return Workload.objects.select_for_update().filter(pk=workload_id).first()


def _append_workload(actor: Actor, workload: Workload, changes: Sequence[DomainEvent]) -> None:
    store.append(
        ev.WORKLOAD_STREAM,
        str(workload.pk),
        changes,
        expected_version=workload.version,
        metadata=actor.metadata(workload.organization_id),
    )


def _released(workload: Workload, reason: str, message: str, status: str) -> ev.AllocationReleased:
    return ev.AllocationReleased(
        allocation_id=_held(workload),
        cluster_id=workload.cluster_id,
        reason=reason,
        message=message,
        status=status,
        released_at=timezone.now(),
    )


def _held(workload: Workload) -> uuid.UUID:
    """The allocation the workload holds; callers have checked it holds one."""
    if workload.allocation_id is None:
        raise WorkloadFinished(f"workload {workload.pk} holds no GPUs")
    return workload.allocation_id


# --- runs ------------------------------------------------------------------------------------


def run_holder(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> Workload | None:
    """The workload, locked, if it still holds ``allocation_id``."""
    workload = _locked(workload_id)
    if workload is None or str(workload.allocation_id) != str(allocation_id):
        return None
    return workload


def run_provisioning(
    *, actor: Actor, workload: Workload, placements: list[dict[str, object]]
) -> None:
    _append_workload(
        actor,
        workload,
        [
            ev.WorkloadProvisioning(
                allocation_id=_held(workload),
                placements=[ev.PlacementData.model_validate(p) for p in placements],
            )
        ],
    )


def run_started(*, actor: Actor, workload: Workload, details: dict[str, str]) -> None:
    _append_workload(
        actor,
        workload,
        [
            ev.WorkloadRunning(
                allocation_id=_held(workload),
                started_at=timezone.now(),
                details={k: str(v) for k, v in details.items()},
            )
        ],
    )


def run_ended(*, actor: Actor, workload: Workload, reason: str, message: str) -> str:
    """Release the run's GPUs; the workload is requeued or ends as its policy says.
    Returns the status it is left in."""
    status = _after_run(workload, reason)
    allocation = Allocation.objects.get(pk=_held(workload))
    _append_workload(actor, workload, [_released(workload, reason, message, status)])
    triggers.drain_check([p["node_id"] for p in allocation.placements])
    triggers.cycle_wanted(workload.cluster_id)
    if status in FINAL_STATUSES:
        hooks.workload_ended(Workload.objects.get(pk=workload.pk))
    return status


def run_discarded(*, actor: Actor, workload: Workload) -> None:
    """Give back GPUs granted to a workload that had already ended (its run ended while a
    scheduler preempted it, and that scheduler granted it again): its status stays."""
    _append_workload(
        actor,
        workload,
        [_released(workload, "superseded", "the workload had already ended", workload.status)],
    )
    triggers.cycle_wanted(workload.cluster_id)


def _after_run(workload: Workload, reason: str) -> str:
    if workload.cancel_requested or reason == "cancelled":
        return WorkloadStatus.CANCELLED
    if reason == "max_runtime":
        return WorkloadStatus.FAILED  # stopped: retrying would overrun again
    service = workload.kind == WorkloadKind.SERVICE
    if reason == "succeeded":
        restart = service and workload.restart_policy == RestartPolicy.ALWAYS
        return WorkloadStatus.PENDING if restart else WorkloadStatus.SUCCEEDED
    # failed, node_failure, lost: counted against the retries.
    if service:
        retry = workload.restart_policy != RestartPolicy.NEVER
    else:
        retry = workload.failures < workload.retry_limit
    return WorkloadStatus.PENDING if retry else WorkloadStatus.FAILED


# --- reservations ----------------------------------------------------------------------------


def reservation_create(
    *,
    actor: Actor,
    project: Project,
    gpu_model: str,
    gpus: int,
    starts_at: datetime,
    ends_at: datetime,
    region: str | None = None,
    offering: str | None = None,
    order_id: uuid.UUID | None = None,
) -> Reservation:
    """Hold ``gpus`` of ``gpu_model`` for the project's queue in a window. Refused when the
    reservations overlapping the window already hold what the cluster has of that model."""
    organization = Organization.objects.get(pk=project.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    if gpus < 1:
        raise _invalid("gpus", "gpus must be at least 1")
    if ends_at <= starts_at:
        raise _invalid("ends_at", "the window must end after it starts")
    now = timezone.now()
    if ends_at <= now:
        raise _invalid("ends_at", "the window is over")
    # An order's window was checked when it was placed; its approval may come after the start.
    if order_id is None and starts_at < now - RESERVATION_START_TOLERANCE:
        raise _invalid("starts_at", "the window starts in the past")
    if ends_at > now + RESERVATION_HORIZON:
        raise _invalid(
            "ends_at", f"the window ends beyond {RESERVATION_HORIZON.days} days from now"
        )
    spec = WorkloadSpec(name="reservation", gpu_models=(gpu_model,), region=region)
    _check_shape(spec)
    cluster = _cluster_for(spec)
    reservation_id = uuid.uuid4()
    with transaction.atomic():
        # One reservation at a time per cluster: the capacity check below must not race.
        Cluster.objects.select_for_update().get(pk=cluster.pk)
        fleet = sum(
            n.gpus.count()
            for n in Node.objects.filter(cluster=cluster, gpu_model_id=gpu_model).exclude(
                state__in=["decommissioned", "decommissioning", "failed"]
            )
        )
        overlapping = Reservation.objects.filter(
            cluster_id=cluster.pk,
            gpu_model=gpu_model,
            status=ReservationStatus.ACTIVE,
            starts_at__lt=ends_at,
            ends_at__gt=starts_at,
        )
        held = sum(r.gpus for r in overlapping)
        if held + gpus > fleet:
            raise ReservationConflict(
                f"cluster {cluster.slug} has {fleet} {gpu_model}; {held} are reserved in"
                f" that window, {gpus} more do not fit",
                details={"fleet": fleet, "reserved": held},
            )
        store.append(
            ev.RESERVATION_STREAM,
            str(reservation_id),
            [
                ev.ReservationCreated(
                    reservation_id=reservation_id,
                    organization_id=organization.pk,
                    project_id=project.pk,
                    cluster_id=cluster.pk,
                    gpu_model=gpu_model,
                    gpus=gpus,
                    starts_at=starts_at,
                    ends_at=ends_at,
                    offering=offering,
                    order_id=order_id,
                )
            ],
            expected_version=NO_STREAM,
            metadata=actor.metadata(organization.pk),
        )
        triggers.cycle_wanted(cluster.pk)
    return Reservation.objects.get(pk=reservation_id)


def reservation_cancel(*, actor: Actor, reservation: Reservation, reason: str = "") -> Reservation:
    organization = Organization.objects.get(pk=reservation.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    with transaction.atomic():
        reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
        if reservation.status == ReservationStatus.CANCELLED:
            return reservation
        store.append(
            ev.RESERVATION_STREAM,
            str(reservation.pk),
            [ev.ReservationCancelled(reason=reason or f"cancelled by {actor.label}")],
            expected_version=reservation.version,
            metadata=actor.metadata(organization.pk),
        )
        triggers.cycle_wanted(reservation.cluster_id)
    return Reservation.objects.get(pk=reservation.pk)
