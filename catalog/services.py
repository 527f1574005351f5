"""Catalog writes, operators only. Definitions are idempotent (defining the same again records
nothing), so a catalog file or an admin save can run twice. Each write locks the offering's
row, then appends to ``offering/<slug>`` with the version it read.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence

from catalog import events as ev
from catalog.errors import OfferingInvalid
from catalog.models import Offering, OfferingKind, PricePlan
from events import store
from events.store import Metadata
from events.types import DomainEvent
from inventory.models import GpuModel, Region
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import row_lock
from scheduler.engine import Topology
from scheduler.services.program import check_program_bounds
from scheduler.specs import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_RESERVED_GPUS,
    MAX_RUNTIME_S,
    RESERVATION_HORIZON,
    WorkloadKind,
    WorkloadSpec,
)
from scheduler.specs import PricePlan as Plan
from tenants.access import Action, Actor

PRICE_PLAN_NAMESPACE = uuid.UUID("3b0f7a52-2d8e-4c1e-9a56-636174616c67")
TOPOLOGIES = tuple(Topology)
CURRENCY = re.compile(r"^[A-Z]{3}$")
WHOLE = 1000  # milli-GPU in one GPU
MAX_PRICE_PER_GPU_HOUR_MINOR = 100_000_000  # a million a GPU-hour: beyond it, a typo
# Reserved capacity sells reserved plans only; everything else is run now, on demand or
# preemptible.
PLANS_BY_KIND: dict[str, frozenset[str]] = {
    OfferingKind.INSTANCE: frozenset({Plan.ON_DEMAND, Plan.PREEMPTIBLE}),
    OfferingKind.TRAINING: frozenset({Plan.ON_DEMAND, Plan.PREEMPTIBLE}),
    OfferingKind.INFERENCE: frozenset({Plan.ON_DEMAND, Plan.PREEMPTIBLE}),
    OfferingKind.RESERVED: frozenset({Plan.RESERVED}),
    OfferingKind.DEV: frozenset({Plan.ON_DEMAND, Plan.PREEMPTIBLE}),  # issue 32
}


# The workload an offering's kind runs: a job, a dev environment, else a service.
WORKLOAD_KINDS: dict[str, WorkloadKind] = {
    OfferingKind.TRAINING: WorkloadKind.JOB,
    OfferingKind.DEV: WorkloadKind.DEV,
}
# Kinds ordered one at a time, on one node.
ONE_NODE_KINDS = (OfferingKind.INSTANCE, OfferingKind.DEV)


def _append(actor: Actor, slug: str, events: Sequence[DomainEvent], expected_version: int) -> None:
    store.append(
        ev.OFFERING_STREAM,
        slug,
        events,
        expected_version=expected_version,
        metadata=Metadata(
            actor=actor.label,
            correlation_id=actor.correlation_id,
            idempotency_key=actor.idempotency_key,
        ),
    )


def _locked(slug: str) -> Offering | None:
    """The offering as it is now, locked until the transaction ends (then the append lock)."""
    return row_lock(Offering.objects.all()).filter(slug=slug).first()


def price_plan_id(offering: str, region: str, plan: str) -> uuid.UUID:
    return uuid.uuid5(PRICE_PLAN_NAMESPACE, f"{offering}/{region}/{plan}")


# What a workload against an offering runs unless its request says: the offering's defaults
# (``scheduler.specs.PROGRAM_FIELDS`` but secrets, which are the project's).
PROGRAM_DEFAULTS = ("image", "command", "env", "working_dir", "ports")
# What defines an offering: the keyword arguments of ``offering_define`` beside ``actor``, for
# the forms and files that feed it.
DEFINITION_FIELDS = (
    "slug",
    "name",
    "description",
    "kind",
    "gpu_models",
    "gpus_per_node",
    "max_nodes",
    "gang",
    "gpu_milli",
    "topology",
    "max_runtime_s",
    "max_gpus",
    "max_duration_s",
    *PROGRAM_DEFAULTS,
)


def offering_define(
    *,
    actor: Actor,
    slug: str,
    name: str,
    kind: str,
    gpu_models: Sequence[str],
    description: str = "",
    gpus_per_node: int = 1,
    max_nodes: int = 1,
    gang: bool = True,
    gpu_milli: int = WHOLE,
    topology: str = "any",
    max_runtime_s: int | None = None,
    max_gpus: int | None = None,
    max_duration_s: int | None = None,
    image: str | None = None,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    working_dir: str | None = None,
    ports: Sequence[int] | None = None,
) -> Offering:
    """Create or change an offering. What each kind uses:

    - ``instance``: ``gpus_per_node`` GPUs on one node (1xH100 … 8xH100);
    - ``training``: ``gpus_per_node`` x up to ``max_nodes`` nodes, a gang unless ``gang`` is
      off, runtime at most ``max_runtime_s``;
    - ``inference``: up to ``max_nodes`` replicas of ``gpus_per_node`` GPUs each, or of a
      ``gpu_milli`` share of one GPU (shareable models only; one replica per order, as the
      scheduler places a share on one node);
    - ``reserved``: up to ``max_gpus`` GPUs of one of ``gpu_models`` for at most
      ``max_duration_s``.

    ``image``, ``command``, ``env``, ``working_dir`` and ``ports`` are what its workloads run
    where their request gives none (reserved capacity runs nothing: none of them).
    """
    actor.require(Action.CATALOG_WRITE)
    wanted = ev.OfferingDefined(
        slug=slug,
        name=name,
        description=description,
        kind=kind,
        gpu_models=list(gpu_models),
        gpus_per_node=gpus_per_node,
        max_nodes=max_nodes,
        gang=gang,
        gpu_milli=gpu_milli,
        topology=topology,
        max_runtime_s=max_runtime_s,
        max_gpus=max_gpus,
        max_duration_s=max_duration_s,
        image=image or "",
        command=list(command or ()),
        env=dict(env or {}),
        working_dir=working_dir or "",
        ports=list(ports or ()),
    )
    _check_definition(wanted)
    current = _locked(slug)
    if current is None or _definition(current) != wanted:
        _append(actor, slug, [wanted], current.version if current else 0)
    return Offering.objects.get(slug=slug)


def _definition(offering: Offering) -> ev.OfferingDefined:
    return ev.OfferingDefined(
        **{name: getattr(offering, name) for name in ev.OfferingDefined.model_fields}
    )


def _check_definition(wanted: ev.OfferingDefined) -> None:
    problems: dict[str, list[str]] = {}
    if wanted.kind not in OfferingKind.values:
        problems["kind"] = [f"one of {', '.join(OfferingKind.values)}"]
    if not wanted.gpu_models:
        problems["gpu_models"] = ["at least one GPU model"]
    known = {m.slug: m.shareable for m in GpuModel.objects.filter(slug__in=wanted.gpu_models)}
    unknown = [m for m in wanted.gpu_models if m not in known]
    if unknown:
        problems["gpu_models"] = [f"unknown GPU model {m!r}" for m in unknown]
    if len(set(wanted.gpu_models)) != len(wanted.gpu_models):
        problems["gpu_models"] = ["listed twice"]
    if not 1 <= wanted.gpus_per_node <= MAX_GPUS_PER_NODE:
        problems["gpus_per_node"] = [f"1 to {MAX_GPUS_PER_NODE}"]
    if not 1 <= wanted.max_nodes <= MAX_NODES:
        problems["max_nodes"] = [f"1 to {MAX_NODES}"]
    if wanted.max_runtime_s is not None and not 1 <= wanted.max_runtime_s <= MAX_RUNTIME_S:
        problems["max_runtime_s"] = [f"1 to {MAX_RUNTIME_S} s"]
    if wanted.max_gpus is not None and not 1 <= wanted.max_gpus <= MAX_RESERVED_GPUS:
        problems["max_gpus"] = [f"1 to {MAX_RESERVED_GPUS}"]
    horizon = int(RESERVATION_HORIZON.total_seconds())
    if wanted.max_duration_s is not None and not 1 <= wanted.max_duration_s <= horizon:
        problems["max_duration_s"] = [f"1 to {horizon} s: a reservation ends within the horizon"]
    if wanted.topology not in TOPOLOGIES:
        problems["topology"] = [f"one of {', '.join(TOPOLOGIES)}"]
    if not 1 <= wanted.gpu_milli <= WHOLE:
        problems["gpu_milli"] = [f"1 to {WHOLE}"]
    elif wanted.gpu_milli < WHOLE:
        if wanted.kind != OfferingKind.INFERENCE:
            problems["gpu_milli"] = ["shares of a GPU are sold as inference only"]
        elif wanted.gpus_per_node != 1:
            problems["gpu_milli"] = ["a share is of one GPU: gpus_per_node must be 1"]
        elif not all(known.get(m, True) for m in wanted.gpu_models):
            problems["gpu_milli"] = ["every GPU model of a shared offering must be shareable"]
    if wanted.kind in ONE_NODE_KINDS and wanted.max_nodes != 1:
        problems["max_nodes"] = [f"an offering of kind {wanted.kind} is on one node"]
    if wanted.kind == OfferingKind.RESERVED and not (wanted.max_gpus and wanted.max_duration_s):
        problems["max_gpus"] = ["reserved capacity needs max_gpus and max_duration_s"]
    problems |= _program_problems(wanted)
    if problems:
        raise OfferingInvalid(f"offering {wanted.slug!r} is not valid", fields=problems)


def _program_problems(wanted: ev.OfferingDefined) -> dict[str, list[str]]:
    """The defaults held to a workload's bounds, as the workload of its kind would be."""
    given = [name for name in PROGRAM_DEFAULTS if getattr(wanted, name)]
    if wanted.kind == OfferingKind.RESERVED:
        return {name: ["reserved capacity runs nothing of its own"] for name in given}
    spec = WorkloadSpec(
        name=wanted.slug,
        gpu_models=(),
        kind=WORKLOAD_KINDS.get(wanted.kind, WorkloadKind.SERVICE),
        image=wanted.image or None,
        command=tuple(wanted.command),
        env=wanted.env,
        working_dir=wanted.working_dir or None,
        ports=tuple(wanted.ports),
    )
    try:
        check_program_bounds(spec)
    except ValidationFailed as refused:
        return {name: [refused.message] for name in refused.fields}
    return {}


def offering_retire(*, actor: Actor, offering: Offering, reason: str = "") -> Offering:
    """No new orders for it; what was ordered keeps running."""
    actor.require(Action.CATALOG_WRITE)
    current = _locked(offering.slug)
    if current is not None and current.active:
        _append(actor, current.slug, [ev.OfferingRetired(reason=reason)], current.version)
    return Offering.objects.get(slug=offering.slug)


def offering_reactivate(*, actor: Actor, offering: Offering) -> Offering:
    actor.require(Action.CATALOG_WRITE)
    current = _locked(offering.slug)
    if current is not None and not current.active:
        _append(actor, current.slug, [ev.OfferingReactivated()], current.version)
    return Offering.objects.get(slug=offering.slug)


def price_plan_set(
    *,
    actor: Actor,
    offering: Offering,
    region: str,
    plan: str,
    price_per_gpu_hour_minor: int,
    currency: str,
) -> PricePlan:
    """Set (create or replace) the price of ``offering`` in ``region`` under ``plan``."""
    actor.require(Action.CATALOG_WRITE)
    current = _locked(offering.slug)
    if current is None:
        raise OfferingInvalid("no such offering", fields={"offering": ["unknown"]})
    problems: dict[str, list[str]] = {}
    if not Region.objects.filter(slug=region).exists():
        problems["region"] = [f"unknown region {region!r}"]
    if plan not in PLANS_BY_KIND[current.kind]:
        problems["plan"] = [
            f"a {current.kind} offering sells {', '.join(sorted(PLANS_BY_KIND[current.kind]))}"
        ]
    if not CURRENCY.match(currency):
        problems["currency"] = ["an ISO 4217 code such as USD"]
    if not 0 <= price_per_gpu_hour_minor <= MAX_PRICE_PER_GPU_HOUR_MINOR:
        problems["price_per_gpu_hour_minor"] = [f"0 to {MAX_PRICE_PER_GPU_HOUR_MINOR}"]
    if problems:
        raise OfferingInvalid("price plan is not valid", fields=problems)
    plan_id = price_plan_id(current.slug, region, plan)
    wanted = ev.PricePlanSet(
        price_plan_id=plan_id,
        region=region,
        plan=plan,
        price_per_gpu_hour_minor=price_per_gpu_hour_minor,
        currency=currency,
    )
    existing = PricePlan.objects.filter(pk=plan_id).first()
    if existing is None or (existing.price_per_gpu_hour_minor, existing.currency) != (
        price_per_gpu_hour_minor,
        currency,
    ):
        _append(actor, current.slug, [wanted], current.version)
    return PricePlan.objects.get(pk=plan_id)


def price_plan_remove(*, actor: Actor, price_plan: PricePlan) -> None:
    """The offering is no longer sold in that region under that plan."""
    actor.require(Action.CATALOG_WRITE)
    current = _locked(price_plan.offering_id)
    if current is not None and PricePlan.objects.filter(pk=price_plan.pk).exists():
        _append(
            actor,
            current.slug,
            [ev.PricePlanRemoved(price_plan_id=price_plan.pk)],
            current.version,
        )
