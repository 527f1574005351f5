"""Scheduling writes: policy (priority classes, queues), workloads and reservations, and the
ends of runs. Each workload write locks the workload's row and appends to its stream with the
version it read; the scheduling service (``scheduling``) is told on commit.

Every way of starting work (an order, the workloads and reservations API, an admin action)
ends in ``workload_submit`` or ``reservation_create``, so the rules of new work live here:
the organization's standing (``check_standing``: active, payment, the month's GPU-hours),
the approval threshold (larger work only through an approved order), quotas, and the price
plan, which follows from what the workload is.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from events import store
from events.store import NO_STREAM
from events.types import DomainEvent
from inventory.models import Cluster, GpuModel, Node
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import row_lock
from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.errors import (
    ApprovalRequired,
    GpuHoursExhausted,
    PaymentRequired,
    QuotaExceeded,
    ReservationConflict,
    Unschedulable,
    WorkloadFinished,
)
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
    PricePlan,
    RestartPolicy,
    WorkloadKind,
    WorkloadSpec,
)
from tenants.access import Action, Actor
from tenants.errors import OrganizationSuspended, PermissionDenied
from tenants.models import Organization, Project, Quota

# Used when operators have defined none of that name.
BUILTIN_PRIORITY_CLASSES: dict[str, tuple[int, bool]] = {
    "low": (0, True),
    "standard": (100, False),
    "high": (200, False),
    "production": (1000, False),
}
TOPOLOGIES = ("any", "single_node", "same_nvlink_domain", "same_rack")
MILLI_GPU_SECONDS_PER_GPU_HOUR = 3_600_000


# --- policy ----------------------------------------------------------------------------------


def priority_class_define(
    *, actor: Actor, name: str, value: int, preemptible: bool = False, description: str = ""
) -> PriorityClass:
    actor.require(Action.SCHEDULING_WRITE)
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
    actor.require(Action.SCHEDULING_WRITE)
    if weight <= 0:
        raise ValidationFailed("weight must be positive", fields={"weight": ["not_positive"]})
    with transaction.atomic():
        row_lock(Project.objects.all()).get(pk=project.pk)
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


# --- the rules of new work --------------------------------------------------------------------


def check_standing(
    *, organization: Organization, project: Project, gpu_models: Sequence[str]
) -> None:
    """The organization may start new work in ``project`` on one of ``gpu_models`` (none:
    any model): it is active, no payment check (billing's dunning, the budget's hard stop)
    objects, and no quota of those models has spent its GPU-hours this month. Work already
    running is never stopped by any of these."""
    if not organization.is_active:
        raise OrganizationSuspended(
            f"organization {organization.slug} is suspended: it can read but start nothing"
        )
    refusal = hooks.payment_refusal(organization)
    if refusal:
        raise PaymentRequired(refusal, fields={"organization": [refusal]})
    _check_gpu_hours(organization, project, gpu_models)


def _check_gpu_hours(
    organization: Organization, project: Project, gpu_models: Sequence[str]
) -> None:
    """A quota's ``monthly_gpu_hours`` holds the UTC month's metered usage of its model (the
    organization's, or the project's for a project's quota). Work that may run on a spent
    model is refused, even if it names others too: the engine may place it on any of them."""
    quotas = Quota.objects.filter(
        Q(project__isnull=True) | Q(project=project),
        organization=organization,
        monthly_gpu_hours__isnull=False,
    )
    if gpu_models:
        quotas = quotas.filter(gpu_model__in=gpu_models)
    now = timezone.now()
    used: dict[uuid.UUID | None, dict[str, int]] = {}
    for quota in quotas.order_by(F("project").asc(nulls_first=True), "gpu_model"):
        if quota.project_id not in used:
            used[quota.project_id] = dict(hooks.month_usage(organization.pk, quota.project_id, now))
        milli = used[quota.project_id].get(quota.gpu_model, 0)
        limit = quota.monthly_gpu_hours or 0
        if milli < limit * MILLI_GPU_SECONDS_PER_GPU_HOUR:
            continue
        hours = f"{Decimal(milli) / MILLI_GPU_SECONDS_PER_GPU_HOUR:.3f}"
        scope = (
            f"project {project.slug}" if quota.project_id else f"organization {organization.slug}"
        )
        message = f"{scope} used {hours} of its {limit} {quota.gpu_model} GPU-hours this month"
        raise GpuHoursExhausted(
            message,
            fields={"gpu_models": [message]},
            details={
                "gpu_model": quota.gpu_model,
                "used_gpu_hours": hours,
                "monthly_gpu_hours": limit,
            },
        )


def _check_approval(gpus: int, field: str, order_id: uuid.UUID | None) -> None:
    """Work of more GPUs than the approval threshold starts only from an order, which an
    operator approved (orders at most the threshold are approved at once)."""
    threshold = hooks.approval_threshold()
    if order_id is not None or threshold is None or gpus <= threshold:
        return
    message = (
        f"{gpus} GPUs is over the approval threshold of {threshold}: order it"
        " (POST /api/v1/orders), an operator approves it"
    )
    raise ApprovalRequired(
        message, fields={field: [message]}, details={"gpus": gpus, "threshold": threshold}
    )


def _price_plan(spec: WorkloadSpec, preemptible: bool) -> PricePlan:
    """The plan follows from what the workload is: on its reservation, reserved; preemptible,
    preemptible; else on demand. A request naming another plan is refused."""
    if spec.reservation is not None:
        plan = PricePlan.RESERVED
    elif preemptible:
        plan = PricePlan.PREEMPTIBLE
    else:
        plan = PricePlan.ON_DEMAND
    named = spec.price_plan
    if named is None or named == plan:
        return plan
    if named == PricePlan.RESERVED:
        why = "reserved is for work on a reservation"
    elif plan == PricePlan.RESERVED:
        why = f"{named} is for work off a reservation"
    elif named == PricePlan.PREEMPTIBLE:
        why = "preemptible is for preemptible work"
    else:
        why = f"{named} is for work that is not preemptible"
    message = f"{why}; this workload is billed {plan}"
    raise ValidationFailed(message, fields={"price_plan": [message]})


# --- workloads -------------------------------------------------------------------------------


def workload_submit(
    *,
    actor: Actor,
    project: Project,
    spec: WorkloadSpec,
    order_id: uuid.UUID | None = None,
) -> Workload:
    """Validate ``spec`` against the fleet, the quota and the organization's standing, and
    queue it on a cluster. ``order_id``: the approved order it fulfils (then it may be over
    the approval threshold)."""
    organization = Organization.objects.get(pk=project.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    visible = actor.visible_project_ids(organization.pk)
    if visible is not None and project.pk not in visible:
        raise PermissionDenied("not allowed to submit to this project")
    _check_shape(spec)
    priority, class_preemptible = priority_of(spec.priority_class)
    preemptible = spec.preemptible or class_preemptible
    plan = _price_plan(spec, preemptible)
    cluster = _cluster_for(spec)
    _check_fits(spec, cluster)
    _check_quota(project, spec)
    _check_reservation(project, spec, cluster)
    check_standing(organization=organization, project=project, gpu_models=spec.gpu_models)
    gpus = -(-spec.gpus_per_node * spec.nodes * spec.gpu_milli // 1000)
    _check_approval(gpus, "gpus_per_node", order_id)
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
                    preemptible=preemptible,
                    topology=spec.topology,
                    runtime_estimate_s=spec.runtime_estimate_s,
                    max_runtime_s=spec.max_runtime_s,
                    retry_limit=spec.retry_limit,
                    restart_policy=spec.restart_policy.value,
                    reservation_id=spec.reservation,
                    price_plan=plan.value,
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
    return row_lock(Workload.objects.all()).filter(pk=workload_id).first()


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
    reservations overlapping the window already hold what the cluster has of that model, or
    with this one would hold more than the project's or the organization's quota; when the
    organization may not start work (``check_standing``); and over the approval threshold
    unless it fulfils an approved order (``order_id``).

    Locks the organization's row, then the cluster's, then the log's append lock: the quota
    check spans the organization's clusters, the capacity check the cluster's reservations."""
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
    check_standing(organization=organization, project=project, gpu_models=(gpu_model,))
    _check_approval(gpus, "gpus", order_id)
    reservation_id = uuid.uuid4()
    with transaction.atomic():
        # One reservation at a time: the quota and capacity checks below must not race.
        # Under the log's lock, not the organization's or the cluster's rows: an order appends
        # before it reserves, and no row is locked after the log's lock (core.transactions).
        store.take_append_lock()
        _check_reserved_quota(project, gpu_model, gpus, starts_at, ends_at)
        fleet = sum(
            n.gpus.count()
            for n in Node.objects.filter(cluster=cluster, gpu_model_id=gpu_model).exclude(
                state__in=["decommissioned", "decommissioning", "failed"]
            )
        )
        overlapping = _reservations_overlapping(starts_at, ends_at).filter(
            cluster_id=cluster.pk, gpu_model=gpu_model
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


def _reservations_overlapping(starts_at: datetime, ends_at: datetime) -> QuerySet[Reservation]:
    """Active reservations whose window meets ``[starts_at, ends_at)``."""
    return Reservation.objects.filter(
        status=ReservationStatus.ACTIVE, starts_at__lt=ends_at, ends_at__gt=starts_at
    )


def _check_reserved_quota(
    project: Project, gpu_model: str, gpus: int, starts_at: datetime, ends_at: datetime
) -> None:
    """The reservations overlapping the window and this one stay within the project's quota
    (its own reservations) and the organization's (all its projects'); both bind."""
    overlapping = _reservations_overlapping(starts_at, ends_at).filter(
        organization_id=project.organization_id, gpu_model=gpu_model
    )
    quotas = Quota.objects.filter(
        Q(project__isnull=True) | Q(project=project),
        organization_id=project.organization_id,
        gpu_model=gpu_model,
    ).select_related("organization", "project")
    for quota in quotas.order_by(F("project").asc(nulls_last=True)):
        held_in = overlapping.filter(project=project) if quota.project else overlapping
        held = held_in.aggregate(total=Sum("gpus"))["total"] or 0
        if held + gpus <= quota.max_gpus:
            continue
        scope = (
            f"project {quota.project.slug}"
            if quota.project
            else f"organization {quota.organization.slug}"
        )
        message = (
            f"{scope} may hold {quota.max_gpus} {gpu_model}; {held} are reserved in that"
            f" window, {gpus} more do not fit"
        )
        raise QuotaExceeded(
            message, fields={"gpus": [message]}, details={"quota": quota.max_gpus, "reserved": held}
        )


def reservation_cancel(*, actor: Actor, reservation: Reservation, reason: str = "") -> Reservation:
    """Give the GPUs back; whoever follows the reservation (its order) is told on commit."""
    organization = Organization.objects.get(pk=reservation.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    reason = reason or f"cancelled by {actor.label}"
    with transaction.atomic():
        reservation = row_lock(Reservation.objects.all()).get(pk=reservation.pk)
        if reservation.status == ReservationStatus.CANCELLED:
            return reservation
        store.append(
            ev.RESERVATION_STREAM,
            str(reservation.pk),
            [ev.ReservationCancelled(reason=reason)],
            expected_version=reservation.version,
            metadata=actor.metadata(organization.pk),
        )
        triggers.cycle_wanted(reservation.cluster_id)
        cancelled = Reservation.objects.get(pk=reservation.pk)
        hooks.reservation_ended(cancelled, f"reservation cancelled: {reason}")
    return cancelled
