"""Submitting a workload: validated against the fleet, the quota, its reservation and the
organization's standing, then queued on a cluster. The price plan follows from what the
workload is.

The checks read without locks; the submission itself is one append to a new stream
(``NO_STREAM``: it cannot conflict), and the cluster's scheduler is asked for a cycle once it
commits.
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.db.models import Q

from events import store
from events.store import NO_STREAM
from inventory import drivers
from inventory.models import Cluster
from neocloud.core.errors import ValidationFailed
from scheduler import events as ev
from scheduler import triggers
from scheduler.errors import QuotaExceeded, Unschedulable
from scheduler.models import Reservation, ReservationStatus, Workload
from scheduler.selectors import priority_of
from scheduler.selectors.fleet import FleetFacts, NodeShape, fleet_facts
from scheduler.services.dev import dev_environment
from scheduler.services.program import check_program
from scheduler.services.shape import check_shape, cluster_for, invalid
from scheduler.services.standing import check_approval, check_standing, check_waiting
from scheduler.services.volumes import check_volumes
from scheduler.specs import PricePlan, WorkloadSpec
from tenants.access import Action, Actor
from tenants.errors import PermissionDenied
from tenants.models import Organization, Project, Quota


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
    submitted = check_submission(actor=actor, project=project, spec=spec, order_id=order_id)
    # No savepoint of its own inside the caller's transaction: an error undoes it all anyway.
    with transaction.atomic(savepoint=False):
        store.append(
            ev.WORKLOAD_STREAM,
            str(submitted.workload_id),
            [submitted],
            expected_version=NO_STREAM,
            metadata=actor.metadata(submitted.organization_id),
        )
        triggers.cycle_wanted(submitted.cluster_id)
    return Workload.objects.get(pk=submitted.workload_id)


def check_submission(
    *,
    actor: Actor,
    project: Project,
    spec: WorkloadSpec,
    order_id: uuid.UUID | None = None,
    copies: int = 1,
    waiting: bool = True,
) -> ev.WorkloadSubmitted:
    """Every check of ``workload_submit``, and the event it would append (a new workload id,
    on the cluster chosen for it). A dry run passes the same checks. ``copies``: how many
    workloads of ``spec`` are asked at once (an array's tasks), each counted by the waiting
    bound and the approval threshold; ``waiting``: False when the caller counts the waiting
    work itself (a list of specs, all at once)."""
    organization = Organization.objects.get(pk=project.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    visible = actor.visible_project_ids(organization.pk)
    if visible is not None and project.pk not in visible:
        raise PermissionDenied("not allowed to submit to this project")
    facts = fleet_facts()  # one read of the fleet's version for every check of it
    spec = dev_environment(spec)
    check_shape(spec, facts)
    check_program(spec, project)
    priority, class_preemptible = priority_of(spec.priority_class, facts)
    preemptible = spec.preemptible or class_preemptible
    plan = _price_plan(spec, preemptible)
    cluster = cluster_for(spec, facts)
    _check_fits(spec, cluster, facts)
    _check_command_given(spec, cluster, facts)
    quotas = list(  # one read for the quota and the month's GPU-hours
        Quota.objects.filter(
            Q(project__isnull=True) | Q(project=project), organization_id=organization.pk
        )
    )
    _check_quota(project, spec, quotas)
    _check_reservation(project, spec, cluster)
    check_standing(
        organization=organization, project=project, gpu_models=spec.gpu_models, quotas=quotas
    )
    if waiting:
        check_waiting(organization=organization, adding={project: copies})
    gpus = -(-spec.gpus_per_node * spec.nodes * spec.gpu_milli // 1000)
    check_approval(gpus * copies, "array.count" if copies > 1 else "gpus_per_node", order_id)
    return ev.WorkloadSubmitted(
        workload_id=uuid.uuid4(),
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
        command=list(spec.command),
        image=spec.image,
        env=dict(spec.env),
        secrets=list(spec.secrets),
        working_dir=spec.working_dir,
        ports=list(spec.ports),
        volumes=check_volumes(spec, project, cluster),
        http_ports=list(spec.http_ports),
        ssh=spec.ssh,
        idle_stop_s=spec.idle_stop_s,
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


def _check_fits(spec: WorkloadSpec, cluster: Cluster, facts: FleetFacts) -> None:
    """Refuse what no node of the cluster could ever hold: it would wait forever."""
    shapes = _of_its_models(spec, cluster, facts)
    fitting = sum(1 for s in shapes if _holds(s, spec))
    needed = spec.min_nodes or spec.nodes
    if fitting < needed:
        largest = max((s.gpus for s in shapes), default=0)
        raise Unschedulable(
            f"cluster {cluster.slug} has {fitting} nodes able to hold"
            f" {spec.gpus_per_node} GPUs with the CPU and memory asked (largest node:"
            f" {largest} GPUs); the workload needs {needed}",
            fields={"gpus_per_node": ["too_large"]},
        )


def _check_command_given(spec: WorkloadSpec, cluster: Cluster, facts: FleetFacts) -> None:
    """Refuse work without a command or an image that may be placed on a node whose driver
    runs programs: its agent would have nothing to start, and the run would fail only then.
    With an image, a container runtime starts the image's own entrypoint."""
    if spec.command or spec.image is not None:
        return
    shapes = _of_its_models(spec, cluster, facts)
    if any(_holds(s, spec) and drivers.runs_programs(s.driver) for s in shapes):
        raise invalid(
            "command",
            f"a command is required without an image: cluster {cluster.slug} has nodes it may"
            " be placed on that run workloads for real",
            "required",
        )


def _of_its_models(spec: WorkloadSpec, cluster: Cluster, facts: FleetFacts) -> list[NodeShape]:
    return [
        s
        for s in facts.nodes.get(cluster.pk, ())
        if not spec.gpu_models or s.gpu_model in spec.gpu_models
    ]


def _holds(shape: NodeShape, spec: WorkloadSpec) -> bool:
    return (
        shape.gpus >= spec.gpus_per_node
        and shape.cpu_milli >= spec.cpu_milli
        and shape.memory_mib >= spec.memory_mib
    )


def _check_quota(project: Project, spec: WorkloadSpec, quotas: list[Quota]) -> None:
    """A workload larger than the project's (or organization's) quota could never start.
    ``quotas``: the organization's own and the project's."""
    limits = {(q.project_id, q.gpu_model): q.max_gpus for q in quotas}

    def limit(model: str) -> int | None:
        return limits.get((project.pk, model), limits.get((None, model)))

    demand = spec.gpus_per_node * (spec.min_nodes or spec.nodes) * spec.gpu_milli / 1000
    for model in spec.gpu_models:
        allowed = limit(model)
        if allowed is None or demand <= allowed:
            return
    if not spec.gpu_models:
        return
    raise QuotaExceeded(
        f"asks {demand:g} GPUs; the quota allows {limit(spec.gpu_models[0])} {spec.gpu_models[0]}",
        fields={"gpus_per_node": ["quota_exceeded"]},
        details={"needed": demand},
    )


def _check_reservation(project: Project, spec: WorkloadSpec, cluster: Cluster) -> None:
    if spec.reservation is None:
        return
    reservation = Reservation.objects.filter(
        pk=spec.reservation, project=project, status=ReservationStatus.ACTIVE
    ).first()
    if reservation is None:
        raise invalid("reservation", "no such active reservation in this project", "unknown")
    if reservation.cluster_id != cluster.pk or (
        spec.gpu_models and reservation.gpu_model not in spec.gpu_models
    ):
        raise invalid("reservation", "the reservation holds other GPUs", "mismatch")
    # The engine holds work on a reservation to its GPUs; more than all of them never starts.
    least = spec.gpus_per_node * (spec.min_nodes or spec.nodes) * spec.gpu_milli
    if least > reservation.gpus * 1000:
        raise ValidationFailed(
            f"the workload asks {least / 1000:g} GPUs at least; reservation {reservation.pk}"
            f" holds {reservation.gpus}",
            fields={"gpus_per_node": ["exceeds_reservation"]},
            details={"asked": least / 1000, "reservation_gpus": reservation.gpus},
        )
