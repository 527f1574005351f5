"""Ordering: an order is checked against the catalog, the organization's standing, its quotas
and its payment standing; large ones wait for an operator; approved ones are fulfilled, and
close when their workload or reservation ends.

Fulfilment runs in the approving transaction: the scheduler's ``workload_submit`` and
``reservation_create`` only append to the log, so the order's approval, the workload (or
reservation) and ``OrderFulfilled`` commit together or not at all. No approved order is ever
left without its workload, and no task or reconciler is needed; placement itself happens
later, in the scheduler's own cycle.

Entry points run these through ``neocloud.core.transactions.atomic_with_retry``. Writes to an
order lock its row, then append to ``order/<id>`` with the version read (lock order: the order
row, then the log's append lock).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.utils import timezone

from catalog import services as catalog
from catalog.models import Offering, OfferingKind, PricePlan
from events import store
from events.store import NO_STREAM
from events.types import DomainEvent
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import atomic_with_retry, row_lock
from orders import events as ev
from orders import selectors
from orders.errors import (
    GpuModelNotOffered,
    InvalidTransition,
    OfferingUnavailable,
    PricePlanNotOffered,
    QuotaExceeded,
    RegionNotOffered,
    ShapeNotAllowed,
)
from orders.models import ApprovalPolicy, Order, OrderStatus
from scheduler import services as scheduler
from scheduler.models import Reservation, Workload
from scheduler.selectors import priority_of
from scheduler.services.program import check_program
from scheduler.specs import (
    PROGRAM_FIELDS,
    RESERVATION_HORIZON,
    RESERVATION_START_TOLERANCE,
    RestartPolicy,
    WorkloadKind,
    WorkloadSpec,
    program,
)
from scheduler.specs import PricePlan as Plan
from tenants import selectors as tenants
from tenants.access import Action, Actor
from tenants.errors import PermissionDenied
from tenants.models import Organization, Project, Quota

SYSTEM = Actor.system_actor("orders")
WHOLE = 1000  # milli-GPU in one GPU
CANCELLABLE = frozenset({OrderStatus.SUBMITTED, OrderStatus.VALIDATED, OrderStatus.APPROVED})
REJECTABLE = frozenset({OrderStatus.SUBMITTED, OrderStatus.VALIDATED})


@dataclass(frozen=True)
class OrderRequest:
    """What a customer chooses within an offering. ``quantity`` counts the offering's unit:
    instances (always 1), training nodes, inference replicas, or reserved GPUs."""

    quantity: int = 1
    gpu_model: str | None = None  # one of the offering's; None: any of them, preferred first
    runtime_estimate_s: int | None = None
    starts_at: datetime | None = None  # reserved capacity only
    ends_at: datetime | None = None
    name: str = ""  # of the workload; default from the offering
    # What the workload runs (``scheduler.specs.PROGRAM_FIELDS``); None: the offering's
    # default, else none. ``workload_submit``'s bounds hold them.
    command: Sequence[str] | None = None
    image: str | None = None
    env: Mapping[str, str] | None = None
    secrets: Sequence[str] | None = None
    working_dir: str | None = None
    ports: Sequence[int] | None = None


@dataclass(frozen=True)
class Shape:
    """An order resolved against its offering: what the scheduler will be asked for."""

    offering: Offering
    plan: str
    gpu_models: tuple[str, ...]
    gpus_per_node: int
    nodes: int
    min_nodes: int | None
    gpu_milli: int
    runtime_estimate_s: int | None
    window: tuple[datetime, datetime] | None  # reserved capacity: held from, until
    price: PricePlan | None  # None when no region was named

    @property
    def gpu_milli_total(self) -> int:
        return self.gpus_per_node * self.nodes * self.gpu_milli

    @property
    def gpus(self) -> int:
        """GPUs held at most: a share of a GPU still takes one GPU out of a quota."""
        return -(-self.gpu_milli_total // WHOLE)

    @property
    def billable_s(self) -> int | None:
        if self.window is not None:
            return int((self.window[1] - self.window[0]).total_seconds())
        return self.runtime_estimate_s


# --- checks -----------------------------------------------------------------------------------


def check_may_order(
    actor: Actor, organization: Organization, project: Project, *, starting: bool = True
) -> None:
    """Owners, admins and members with a write key, in a project they see; operators too.
    ``starting`` (placing an order) is refused while the organization is suspended;
    withdrawing one is not."""
    if starting:
        actor.require(Action.ORDER_WRITE, organization)
    elif not actor.allowed(Action.ORDER_WRITE, organization):
        raise PermissionDenied("not allowed to order.write in this organization")
    visible = actor.visible_project_ids(organization.id)
    if visible is not None and project.pk not in visible:
        raise PermissionDenied("not allowed to order for this project")


def check_shape(
    *, offering_slug: str, region: str | None, price_plan: str, request: OrderRequest
) -> Shape:
    """The request against the catalog: the offering is active, sold under ``price_plan`` in
    ``region`` (anywhere when None), and the quantity, model, runtime and window fit it."""
    offering = Offering.objects.filter(slug=offering_slug, active=True).first()
    if offering is None:
        raise OfferingUnavailable(
            f"no active offering {offering_slug!r}", fields={"offering": ["unavailable"]}
        )
    plans = PricePlan.objects.filter(offering=offering)
    if region is not None:
        plans = plans.filter(region=region)
        if not plans.exists():
            raise RegionNotOffered(
                f"{offering.slug} is not sold in region {region!r}", fields={"region": [region]}
            )
    if not plans.filter(plan=price_plan).exists():
        raise PricePlanNotOffered(
            f"{offering.slug} is not sold {price_plan}"
            + (f" in {region}" if region else "")
            + f"; offered: {', '.join(sorted(set(plans.values_list('plan', flat=True))))}",
            fields={"price_plan": [price_plan]},
        )
    gpu_models = tuple(offering.gpu_models)
    if request.gpu_model is not None:
        if request.gpu_model not in gpu_models:
            raise GpuModelNotOffered(
                f"{offering.slug} runs on {', '.join(gpu_models)}, not {request.gpu_model}",
                fields={"gpu_model": [request.gpu_model]},
            )
        gpu_models = (request.gpu_model,)
    price = plans.filter(plan=price_plan).first() if region is not None else None
    return _shape(offering, price_plan, price, gpu_models, request)


def _refuse(field: str, message: str) -> ShapeNotAllowed:
    return ShapeNotAllowed(message, fields={field: [message]})


def _shape(
    offering: Offering,
    plan: str,
    price: PricePlan | None,
    gpu_models: tuple[str, ...],
    request: OrderRequest,
) -> Shape:
    kind, quantity = offering.kind, request.quantity
    if quantity < 1:
        raise _refuse("quantity", "quantity is at least 1")
    reserved = kind == OfferingKind.RESERVED
    if not reserved and (request.starts_at or request.ends_at):
        raise _refuse("starts_at", "a window is for reserved capacity only")
    if reserved:
        return _reserved_shape(offering, plan, price, gpu_models, request)
    if kind in catalog.ONE_NODE_KINDS and quantity != 1:
        raise _refuse("quantity", "an order is for one instance; order again for more")
    if kind not in catalog.ONE_NODE_KINDS and quantity > offering.max_nodes:
        unit = "nodes" if kind == OfferingKind.TRAINING else "replicas"
        raise _refuse("quantity", f"{offering.slug} allows at most {offering.max_nodes} {unit}")
    if offering.gpu_milli < WHOLE and quantity != 1:
        raise _refuse("quantity", "a share of a GPU is one replica; order again for more")
    runtime = request.runtime_estimate_s
    if offering.max_runtime_s and runtime and runtime > offering.max_runtime_s:
        raise _refuse(
            "runtime_estimate_s",
            f"{offering.slug} runs at most {offering.max_runtime_s} s, asked {runtime} s",
        )
    gang = kind == OfferingKind.TRAINING and offering.gang
    return Shape(
        offering=offering,
        plan=plan,
        gpu_models=gpu_models,
        gpus_per_node=offering.gpus_per_node,
        nodes=quantity,
        min_nodes=None if gang or quantity == 1 else 1,
        gpu_milli=offering.gpu_milli,
        runtime_estimate_s=runtime,
        window=None,
        price=price,
    )


def _reserved_shape(
    offering: Offering,
    plan: str,
    price: PricePlan | None,
    gpu_models: tuple[str, ...],
    request: OrderRequest,
) -> Shape:
    starts_at, ends_at = request.starts_at, request.ends_at
    if starts_at is None or ends_at is None:
        raise _refuse("starts_at", "reserved capacity needs starts_at and ends_at")
    if ends_at <= starts_at:
        raise _refuse("ends_at", "ends_at is after starts_at")
    if starts_at < timezone.now() - RESERVATION_START_TOLERANCE:
        raise _refuse("starts_at", "starts_at is in the past")
    if ends_at > timezone.now() + RESERVATION_HORIZON:
        raise _refuse("ends_at", f"ends_at is beyond {RESERVATION_HORIZON.days} days from now")
    duration = (ends_at - starts_at).total_seconds()
    if offering.max_duration_s and duration > offering.max_duration_s:
        raise _refuse(
            "ends_at",
            f"{offering.slug} holds at most {offering.max_duration_s} s, asked {int(duration)} s",
        )
    if offering.max_gpus and request.quantity > offering.max_gpus:
        raise _refuse("quantity", f"{offering.slug} holds at most {offering.max_gpus} GPUs")
    if request.runtime_estimate_s is not None:
        raise _refuse("runtime_estimate_s", "reserved capacity runs for its window")
    return Shape(
        offering=offering,
        plan=plan,
        gpu_models=gpu_models[:1],  # a reservation holds one model: the requested or preferred
        gpus_per_node=1,
        nodes=request.quantity,
        min_nodes=None,
        gpu_milli=WHOLE,
        runtime_estimate_s=None,
        window=(starts_at, ends_at),
        price=price,
    )


def check_standing(
    *, organization: Organization, project: Project, gpu_models: Sequence[str], gpus: int
) -> None:
    """The organization may start ``gpus`` GPUs of one of ``gpu_models`` in ``project``: the
    scheduler's standing of all new work (active, payment, the month's GPU-hours), and a
    quota (the project's and the organization's, the lower binds) allows that many of at
    least one of the models."""
    scheduler.check_standing(organization=organization, project=project, gpu_models=gpu_models)
    _check_quota(organization, project, gpu_models, gpus)


def _check_quota(
    organization: Organization, project: Project, gpu_models: Sequence[str], gpus: int
) -> None:
    quotas = tenants.quotas_applying(
        organization=organization, project=project, gpu_models=gpu_models
    )
    binding: dict[str, Quota] = {}
    for quota in quotas:
        current = binding.get(quota.gpu_model)
        if current is None or quota.max_gpus < current.max_gpus:
            binding[quota.gpu_model] = quota
    if any(m not in binding or binding[m].max_gpus >= gpus for m in gpu_models):
        return
    limits = {m: binding[m].max_gpus for m in gpu_models}

    def scope(quota: Quota) -> str:
        return (
            f"project {project.slug}" if quota.project_id else f"organization {organization.slug}"
        )

    described = "; ".join(f"{scope(binding[m])} allows {limits[m]} {m}" for m in gpu_models)
    message = f"the order needs {gpus} GPUs; {described}"
    raise QuotaExceeded(
        message, fields={"quantity": [message]}, details={"gpus": gpus, "quota": limits}
    )


# --- the approval threshold -----------------------------------------------------------------


def approval_threshold_set(*, actor: Actor, threshold_gpus: int) -> ApprovalPolicy:
    """Operators set the threshold (``order_policy/approval``); setting it again to the same
    number records nothing."""
    actor.require(Action.ORDER_APPROVE)
    if threshold_gpus < 0:
        raise ValidationFailed("not negative", fields={"threshold_gpus": ["not negative"]})
    policy = selectors.approval_policy()
    if policy is None or policy.threshold_gpus != threshold_gpus:
        store.append(
            ev.POLICY_STREAM,
            ev.APPROVAL_POLICY_ID,
            [ev.ApprovalThresholdSet(threshold_gpus=threshold_gpus)],
            expected_version=store.stream_version(ev.POLICY_STREAM, ev.APPROVAL_POLICY_ID),
            metadata=actor.metadata(),
        )
    return ApprovalPolicy.objects.get(pk=1)


# --- orders -----------------------------------------------------------------------------------


def _append(actor: Actor, order: Order, events: Sequence[DomainEvent]) -> Order:
    store.append(
        ev.ORDER_STREAM,
        str(order.pk),
        events,
        expected_version=order.version,
        metadata=actor.metadata(order.organization_id),
    )
    return Order.objects.get(pk=order.pk)


def _locked(order: Order | uuid.UUID) -> Order:
    """The order as it is now, locked until the transaction ends (then the append lock)."""
    pk = order.pk if isinstance(order, Order) else order
    return row_lock(Order.objects.all()).get(pk=pk)


def _estimated_cost(price_minor: int, shape: Shape) -> int | None:
    """Price x GPU share x hours, in minor units rounded half up; None without a runtime."""
    seconds = shape.billable_s
    if seconds is None:
        return None
    numerator = price_minor * shape.gpu_milli_total * seconds
    denominator = WHOLE * 3600
    return (2 * numerator + denominator) // (2 * denominator)


def order_submit(
    *,
    actor: Actor,
    project: Project,
    offering: str,
    region: str,
    price_plan: str,
    request: OrderRequest,
) -> Order:
    """Check the order and record it: validated, then (at most the approval threshold of GPUs)
    approved and fulfilled at once, or left validated for an operator. Any refusal raises and
    writes nothing."""
    organization = Organization.objects.get(pk=project.organization_id)
    check_may_order(actor, organization, project)
    shape = check_shape(
        offering_slug=offering, region=region, price_plan=price_plan, request=request
    )
    check_standing(
        organization=organization, project=project, gpu_models=shape.gpu_models, gpus=shape.gpus
    )
    price = shape.price
    if price is None:  # only without a region, which an order always names
        raise RegionNotOffered("an order names its region", fields={"region": ["required"]})
    threshold = selectors.approval_threshold()
    needs_approval = shape.gpus > threshold
    order_id = uuid.uuid4()
    # Held to the workload's bounds now: an order that waits for approval writes nothing bad.
    spec = workload_spec(
        shape,
        region=region,
        name=request.name or _name(shape.offering.slug, order_id),
        runs=program_of(shape.offering, request),
    )
    check_program(spec, project)
    store.append(
        ev.ORDER_STREAM,
        str(order_id),
        [
            ev.OrderSubmitted(
                order_id=order_id,
                project_id=project.pk,
                offering=shape.offering.slug,
                kind=shape.offering.kind,
                region=region,
                price_plan=price_plan,
                gpu_model=request.gpu_model or "",
                gpu_models=list(shape.gpu_models),
                quantity=request.quantity,
                gpus_per_node=shape.gpus_per_node,
                nodes=shape.nodes,
                gpu_milli=shape.gpu_milli,
                gpus=shape.gpus,
                runtime_estimate_s=shape.runtime_estimate_s,
                starts_at=shape.window[0] if shape.window else None,
                ends_at=shape.window[1] if shape.window else None,
                price_per_gpu_hour_minor=price.price_per_gpu_hour_minor,
                currency=price.currency,
                estimated_cost_minor=_estimated_cost(price.price_per_gpu_hour_minor, shape),
                name=request.name,
                **{name: getattr(spec, name) for name in PROGRAM_FIELDS},
            ),
            ev.OrderValidated(
                needs_approval=needs_approval,
                reason=f"{shape.gpus} GPUs is over the approval threshold of {threshold}"
                if needs_approval
                else "",
            ),
        ],
        expected_version=NO_STREAM,
        metadata=actor.metadata(organization.pk),
    )
    order = Order.objects.get(pk=order_id)
    if needs_approval:
        return order
    approver = Actor(user=None, system="orders.approval", correlation_id=actor.correlation_id)
    return _approve_and_fulfil(approver, order, shape, submitter=actor, automatic=True)


def _request_of(order: Order) -> OrderRequest:
    return OrderRequest(
        quantity=order.quantity,
        gpu_model=order.gpu_model or None,
        runtime_estimate_s=order.runtime_estimate_s,
        starts_at=order.starts_at,
        ends_at=order.ends_at,
        name=order.name,
    )


def order_approve(*, actor: Actor, order: Order) -> Order:
    """Operators approve a validated order; it is checked again (the catalog, standing and
    quotas may have changed while it waited) and fulfilled."""
    actor.require(Action.ORDER_APPROVE)
    order = _locked(order)
    _require_status(order, "approve", frozenset({OrderStatus.VALIDATED}))
    shape = check_shape(
        offering_slug=order.offering,
        region=order.region,
        price_plan=order.price_plan,
        request=_request_of(order),
    )
    check_standing(
        organization=order.organization,
        project=order.project,
        gpu_models=shape.gpu_models,
        gpus=shape.gpus,
    )
    return _approve_and_fulfil(actor, order, shape, submitter=actor, automatic=False)


def _approve_and_fulfil(
    approver: Actor, order: Order, shape: Shape, *, submitter: Actor, automatic: bool
) -> Order:
    """Approve, then create the workload or reservation as ``submitter`` and record it."""
    order = _append(approver, order, [ev.OrderApproved(automatic=automatic)])
    workload_id = reservation_id = None
    if shape.window is not None:
        reservation = scheduler.reservation_create(
            actor=submitter,
            project=order.project,
            gpu_model=shape.gpu_models[0],
            gpus=shape.nodes,
            starts_at=shape.window[0],
            ends_at=shape.window[1],
            region=order.region,
            offering=order.offering,
            order_id=order.pk,
        )
        reservation_id = reservation.id
    else:
        workload = scheduler.workload_submit(
            actor=submitter,
            project=order.project,
            spec=workload_spec(
                shape,
                region=order.region,
                name=order.name or _name(order.offering, order.pk),
                runs=_program_ordered(order),
            ),
            order_id=order.pk,
        )
        workload_id = workload.id
    return _append(
        approver,
        order,
        [ev.OrderFulfilled(workload_id=workload_id, reservation_id=reservation_id)],
    )


def _name(offering: str, order_id: uuid.UUID) -> str:
    return f"{offering}-{order_id.hex[:8]}"


def program_of(offering: Offering, request: OrderRequest) -> dict[str, Any]:
    """What the workload runs: each program field as the request gives it, else as the
    offering's defaults do (blank there: none)."""
    defaults = {name: getattr(offering, name) or None for name in catalog.PROGRAM_DEFAULTS}
    return {
        **program(defaults),
        **program({name: getattr(request, name) for name in PROGRAM_FIELDS}),
    }


def _program_ordered(order: Order) -> dict[str, Any]:
    """The program the order recorded, as it was resolved when it was submitted."""
    recorded = {name: getattr(order, name) for name in PROGRAM_FIELDS}
    return program(
        {**recorded, "image": order.image or None, "working_dir": order.working_dir or None}
    )


def workload_spec(
    shape: Shape, *, region: str | None, name: str, runs: Mapping[str, Any]
) -> WorkloadSpec:
    """The scheduler's request for a checked shape: training is a job that runs to its end;
    instances and inference are services that run until cancelled, restarted on failure.
    ``runs``: the spec's program fields (``program_of``)."""
    offering = shape.offering
    job = offering.kind == OfferingKind.TRAINING
    return WorkloadSpec(
        name=name,
        gpu_models=shape.gpu_models,
        kind=catalog.WORKLOAD_KINDS.get(offering.kind, WorkloadKind.SERVICE),
        gpus_per_node=shape.gpus_per_node,
        nodes=shape.nodes,
        min_nodes=shape.min_nodes,
        gpu_milli=shape.gpu_milli,
        preemptible=shape.plan == Plan.PREEMPTIBLE,
        topology=offering.topology,
        runtime_estimate_s=shape.runtime_estimate_s,
        max_runtime_s=offering.max_runtime_s,
        restart_policy=RestartPolicy.NEVER if job else RestartPolicy.ON_FAILURE,
        region=region,
        price_plan=Plan(shape.plan),
        offering=offering.slug,
        **runs,
    )


ORDER_PARAMS = frozenset(
    {"quantity", "gpu_model", "runtime_estimate_s", "name", "price_plan", *PROGRAM_FIELDS}
)
# What an offering leaves to the workload: taken as given.
WORKLOAD_PARAMS = frozenset({"cpu_milli", "memory_mib", "priority_class", "retry_limit"})


def workload_spec_for_offering(
    offering_slug: str, region: str | None, params: Mapping[str, Any]
) -> WorkloadSpec:
    """A workload spec for submitting straight against an offering (the workloads API), checked
    against the catalog as an order is. ``params``: ``quantity``, ``gpu_model``,
    ``runtime_estimate_s``, ``name``, ``price_plan`` (default: preemptible for a preemptible
    priority class, else on demand), what it runs (``command``, ``image``, ``env``,
    ``secrets``, ``working_dir``, ``ports``; each not given: the offering's default), and what
    the offering leaves open (``cpu_milli``, ``memory_mib``, ``priority_class``,
    ``retry_limit``); the shape itself (GPUs, nodes, models, topology) is the offering's.
    ``workload_submit`` checks the organization's standing and that the plan fits the
    workload."""
    unknown = sorted(set(params) - ORDER_PARAMS - WORKLOAD_PARAMS)
    if unknown:
        raise ValidationFailed(
            f"set by offering {offering_slug} or unknown: {', '.join(unknown)}",
            fields={name: ["set by the offering"] for name in unknown},
        )
    request = OrderRequest(
        **{f.name: params[f.name] for f in fields(OrderRequest) if f.name in params}
    )
    offering = Offering.objects.filter(slug=offering_slug).first()
    if offering is not None and offering.kind == OfferingKind.RESERVED:
        raise OfferingUnavailable(
            "reserved capacity is ordered (POST /orders), not run",
            fields={"offering": ["reserved"]},
        )
    shape = check_shape(
        offering_slug=offering_slug,
        region=region,
        price_plan=str(params.get("price_plan") or _plan_of_class(params)),
        request=request,
    )
    spec = workload_spec(
        shape,
        region=region,
        name=request.name or offering_slug,
        runs=program_of(shape.offering, request),
    )
    return replace(spec, **{name: params[name] for name in WORKLOAD_PARAMS & set(params)})


def _plan_of_class(params: Mapping[str, Any]) -> Plan:
    preemptible = priority_of(str(params.get("priority_class", "standard")))[1]
    return Plan.PREEMPTIBLE if preemptible else Plan.ON_DEMAND


def _require_status(order: Order, step: str, allowed: frozenset[OrderStatus]) -> None:
    if order.status not in allowed:
        raise InvalidTransition(
            f"order is {order.status}: cannot {step}",
            details={"status": order.status, "allowed_from": sorted(allowed)},
        )


def order_reject(*, actor: Actor, order: Order, reason: str) -> Order:
    """Operators turn down an order that waits for approval."""
    actor.require(Action.ORDER_APPROVE)
    order = _locked(order)
    _require_status(order, "reject", REJECTABLE)
    return _append(actor, order, [ev.OrderRejected(code="rejected_by_operator", reason=reason)])


def order_cancel(*, actor: Actor, order: Order, reason: str = "") -> Order:
    """The customer withdraws an order before it is fulfilled (after: cancel its workload)."""
    order = _locked(order)
    check_may_order(actor, order.organization, order.project, starting=False)
    _require_status(order, "cancel", CANCELLABLE)
    return _append(actor, order, [ev.OrderCancelled(reason=reason or "cancelled by customer")])


def order_close(*, actor: Actor, order_id: uuid.UUID, reason: str) -> Order:
    """A fulfilled order ends with its workload (or reservation). Closing again is a no-op."""
    order = _locked(order_id)
    if order.status == OrderStatus.CLOSED:
        return order
    _require_status(order, "close", frozenset({OrderStatus.FULFILLED}))
    return _append(actor, order, [ev.OrderClosed(reason=reason)])


def order_close_for_workload(workload: Workload) -> None:
    """The scheduler's hook: the order a workload fulfilled closes when the workload ends."""
    if workload.order_id is None:
        return
    atomic_with_retry(
        order_close,
        actor=SYSTEM,
        order_id=workload.order_id,
        reason=f"workload {workload.name} {workload.status}",
    )


def order_close_for_reservation(reservation: Reservation, why: str) -> None:
    """The scheduler's hook: the order a reservation fulfilled closes when it is cancelled."""
    if reservation.order_id is None:
        return
    atomic_with_retry(order_close, actor=SYSTEM, order_id=reservation.order_id, reason=why)


def orders_close_ended(*, actor: Actor, now: datetime | None = None) -> int:
    """Close the fulfilled orders whose workload has ended or whose reservation was cancelled
    or is over, each in a transaction of its own; how many it closed. Run periodically: a
    window running out is no event, and the on-commit hooks are lost if they fail."""
    ended = selectors.orders_ended(now=now or timezone.now())
    for order, why in ended:
        atomic_with_retry(order_close, actor=actor, order_id=order.pk, reason=why)
    return len(ended)
