"""What-if: when work not yet submitted would start, per GPU model and at what price, and what
an operator's change (a drain, a new reservation) would do to the waiting work's start
estimates, before either is done.

Both run the engine's forecast (``scheduler.engine.forecast``) on the cluster as its tables
stand now (its latest forecast inputs, ``latest_forecast_inputs``), once more with the
change: the candidate added to the waiting work (restricted to one GPU model and cluster), or
the drained nodes made unschedulable (their running work goes on until it ends, as a drain
lets it) and the reservation added to the policy. Nothing is written: no event, no row; each
engine run is thrown away.

Reads only, no locks: the cluster may move between the reads and the answer, as it may
between a dry run and the submission that follows it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from fractions import Fraction

from django.utils import timezone

from inventory.models import Cluster
from inventory.selectors import nodes_in_service
from neocloud.core.errors import ValidationFailed
from scheduler import hooks
from scheduler.engine.forecast import Basis, Runtime, StartEstimate, forecast
from scheduler.engine.model import Request, Reservation
from scheduler.errors import GpuHoursExhausted, QuotaExceeded, Unschedulable
from scheduler.events import WorkloadSubmitted
from scheduler.models import Reservation as ReservationRow
from scheduler.models import Workload
from scheduler.selectors.fleet import FleetFacts, fleet_facts
from scheduler.selectors.forecasts import ForecastInputs, latest_forecast_inputs
from scheduler.services.standing import check_forecast_rate
from scheduler.services.submission import check_submission
from scheduler.snapshot import ClusterView, request_of, waiting_of
from scheduler.specs import PricePlan, WorkloadSpec
from scheduler.standing import held_back
from storage.models import Volume, VolumeType
from storage.selectors import local_volume_nodes
from tenants.access import Action, Actor
from tenants.models import Project

# A refusal of a submission restricted to one model that means "never here", not bad input.
NEVER_HERE = (Unschedulable, QuotaExceeded, GpuHoursExhausted)
WHAT_IF_RESERVATION = "what-if"  # the id of the reservation an operator's what-if adds


@dataclass(frozen=True)
class ModelEstimate:
    """When the workload would start on one GPU model of one cluster, and what an hour of it
    would cost there. ``never``: why it could never start there (then no start)."""

    gpu_model: str
    cluster_id: uuid.UUID | None
    cluster: str | None  # its slug
    region: str | None
    gpus: float  # GPUs it holds
    starts_now: bool
    start: datetime | None
    earliest: datetime | None
    latest: datetime | None
    wait_s: float | None
    basis: tuple[str, ...]
    never: str | None
    price_plan: str
    price_per_gpu_hour_minor: int | None  # None: no price known
    price_per_hour_minor: int | None  # all its GPUs; 0 on a reservation (it pays for them)
    currency: str | None


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


# --- Before submitting ----------------------------------------------------------------------


@dataclass(frozen=True)
class AsAsked:
    """When the workload as asked would start: with all its GPU models (none: any), on the
    cluster a submission picks. What the cycle after submitting it decides, as the per-model
    answers may not: a request that may take a model a workload held at the head of the line
    waits for, waits behind it even where another of its models is free."""

    cluster_id: uuid.UUID
    cluster: str
    gpu_models: tuple[str, ...]
    starts_now: bool
    start: datetime | None
    earliest: datetime | None
    latest: datetime | None
    wait_s: float | None
    basis: tuple[str, ...]


@dataclass(frozen=True)
class VolumeLocality:
    """Work that mounts a local volume placed on a node runs only there: when it would start
    there (as asked), and when it would start anywhere in the cluster without the volume."""

    node: str  # the node's name
    starts_now: bool
    wait_s: float | None
    elsewhere_starts_now: bool
    elsewhere_wait_s: float | None


@dataclass(frozen=True)
class WorkloadEstimates:
    """``workload_estimate``'s answer: ``as_asked``, and ``models``: each acceptable GPU
    model and cluster as if the workload were asked for that model alone (soonest first; the
    models it could never start on last); ``locality``: the choice a placed local volume
    gives, or None."""

    as_asked: AsAsked
    models: list[ModelEstimate]
    locality: VolumeLocality | None = None


def workload_estimate(*, actor: Actor, project: Project, spec: WorkloadSpec) -> WorkloadEstimates:
    """What ``workload_submit`` would refuse (the same errors), else when the workload as
    asked would start (the forecast with it added to the waiting work of the cluster it would
    go to: its first cycle is the engine's cycle, the same ordering, head-of-line holds and
    backfill as the real one), and for each acceptable GPU model and cluster whether it
    would start now, else when (restricted to that model), and its price per hour."""
    asked = check_submission(actor=actor, project=project, spec=spec)
    plan = PricePlan(asked.price_plan)
    check_forecast_rate(project.organization_id)
    now = timezone.now()
    facts = fleet_facts()
    inputs: dict[uuid.UUID, ForecastInputs] = {}

    def inputs_of(cluster_id: uuid.UUID) -> ForecastInputs:
        if cluster_id not in inputs:
            inputs[cluster_id] = latest_forecast_inputs(cluster_id)
        return inputs[cluster_id]

    answers = []
    for gpu_model, cluster in _candidates(spec, facts):
        if cluster is None:
            answers.append(_nowhere(spec, gpu_model, plan, now))
            continue
        narrowed = replace(spec, gpu_models=(gpu_model,), cluster=cluster.pk)
        try:
            submitted = check_submission(actor=actor, project=project, spec=narrowed)
        except NEVER_HERE as refused:
            answers.append(_never(narrowed, gpu_model, cluster, plan, refused.message, now))
            continue
        mine = _forecast_of(inputs_of(cluster.pk), submitted, spec.max_runtime_s, now)
        why = "nothing in the cluster could ever hold it" if Basis.NEVER in mine.basis else None
        answers.append(_answer(narrowed, gpu_model, cluster, plan, mine, now, why))
    whole = _forecast_of(inputs_of(asked.cluster_id), asked, spec.max_runtime_s, now)
    cluster = facts.clusters[asked.cluster_id]
    as_asked = AsAsked(
        cluster_id=cluster.pk,
        cluster=cluster.slug,
        gpu_models=tuple(spec.gpu_models),
        starts_now=Basis.NOW in whole.basis,
        start=_moment(whole.start),
        earliest=_moment(whole.earliest),
        latest=_moment(whole.latest),
        wait_s=None if whole.start is None else max(0.0, whole.start - now.timestamp()),
        basis=tuple(b.value for b in whole.basis),
    )
    locality = _locality(actor, project, spec, asked, inputs_of(asked.cluster_id), as_asked, now)
    return WorkloadEstimates(as_asked, sorted(answers, key=_soonest), locality)


def _locality(
    actor: Actor,
    project: Project,
    spec: WorkloadSpec,
    asked: WorkloadSubmitted,
    inputs: ForecastInputs,
    as_asked: AsAsked,
    now: datetime,
) -> VolumeLocality | None:
    """For work held to a placed local volume's node: the same forecast without the volumes
    (so without the node constraint), to say what leaving the data behind would gain."""
    nodes = local_volume_nodes(m.volume for m in spec.volumes) if spec.volumes else None
    placed = Volume.objects.filter(
        pk__in=[m.volume for m in spec.volumes], type=VolumeType.LOCAL, node_id__isnull=False
    ).first()
    if nodes is None or placed is None or len(nodes) != 1:
        return None
    node = inputs.view.node_names.get(str(placed.node_id), str(placed.node_id))
    free = check_submission(actor=actor, project=project, spec=replace(spec, volumes=()))
    elsewhere = _forecast_of(inputs, free, spec.max_runtime_s, now)
    return VolumeLocality(
        node=node,
        starts_now=as_asked.starts_now,
        wait_s=as_asked.wait_s,
        elsewhere_starts_now=Basis.NOW in elsewhere.basis,
        elsewhere_wait_s=(
            None if elsewhere.start is None else max(0.0, elsewhere.start - now.timestamp())
        ),
    )


def _candidates(spec: WorkloadSpec, facts: FleetFacts) -> list[tuple[str, Cluster | None]]:
    """(GPU model, cluster) pairs to answer for: the spec's models (else every model of the
    clusters it may go to) on each cluster that has nodes of them; a named model no cluster
    has, with None. On a reservation: its model on its cluster, nothing else."""
    if spec.reservation is not None:
        held = ReservationRow.objects.get(pk=spec.reservation)
        return [(held.gpu_model, facts.clusters[held.cluster_id])]
    if spec.cluster is not None:
        clusters = [facts.clusters[spec.cluster]]
    else:
        clusters = facts.clusters_with(spec.gpu_models, spec.region)
    pairs: list[tuple[str, Cluster | None]] = []
    for cluster in clusters:
        present = sorted({s.gpu_model for s in facts.nodes.get(cluster.pk, ())})
        models = [m for m in spec.gpu_models if m in present] if spec.gpu_models else present
        pairs.extend((model, cluster) for model in models)
    pairs.extend((m, None) for m in spec.gpu_models if all(m != p for p, _ in pairs))
    return pairs


def _gpus(spec: WorkloadSpec) -> Fraction:
    return Fraction(spec.gpus_per_node * spec.nodes * spec.gpu_milli, 1000)


def _price(
    spec: WorkloadSpec, gpu_model: str, region: str | None, plan: PricePlan
) -> tuple[int | None, int | None, str | None]:
    """(per GPU-hour, per hour of all its GPUs, currency); a reservation's work is paid for
    by the reservation (rating shows it at zero)."""
    found = hooks.gpu_hour_price.first(spec.offering, region, plan.value, gpu_model)
    if found is None:
        return None, (0 if plan is PricePlan.RESERVED else None), None
    minor, currency = found
    if plan is PricePlan.RESERVED:
        return minor, 0, currency
    hourly = _gpus(spec) * minor
    return minor, int(hourly + Fraction(1, 2)), currency  # half up, as rating rounds


def _answer(
    spec: WorkloadSpec,
    gpu_model: str,
    cluster: Cluster | None,
    plan: PricePlan,
    estimate: StartEstimate,
    now: datetime,
    never: str | None = None,
) -> ModelEstimate:
    region = cluster.region_id if cluster else spec.region
    per_gpu, per_hour, currency = _price(spec, gpu_model, region, plan)
    start = estimate.start
    return ModelEstimate(
        gpu_model=gpu_model,
        cluster_id=cluster.pk if cluster else None,
        cluster=cluster.slug if cluster else None,
        region=region,
        gpus=float(_gpus(spec)),
        starts_now=Basis.NOW in estimate.basis,
        start=_moment(start),
        earliest=_moment(estimate.earliest),
        latest=_moment(estimate.latest),
        wait_s=None if start is None else max(0.0, start - now.timestamp()),
        basis=tuple(b.value for b in estimate.basis),
        never=never,
        price_plan=plan.value,
        price_per_gpu_hour_minor=per_gpu,
        price_per_hour_minor=per_hour,
        currency=currency,
    )


def _never(
    spec: WorkloadSpec,
    gpu_model: str,
    cluster: Cluster | None,
    plan: PricePlan,
    why: str,
    now: datetime,
) -> ModelEstimate:
    never = StartEstimate("", None, None, None, (Basis.NEVER,))
    return _answer(spec, gpu_model, cluster, plan, never, now, why)


def _nowhere(spec: WorkloadSpec, gpu_model: str, plan: PricePlan, now: datetime) -> ModelEstimate:
    where = f" in region {spec.region}" if spec.region else ""
    return _never(spec, gpu_model, None, plan, f"no cluster{where} has {gpu_model} nodes", now)


def _forecast_of(
    inputs: ForecastInputs, submitted: WorkloadSubmitted, max_runtime_s: float | None, now: datetime
) -> StartEstimate:
    """The forecast of the cluster's waiting work with ``submitted`` added (at ``now``), as a
    cycle would see the line: the work of organizations held back left out."""
    candidate = request_of({**submitted.model_dump(), "submitted_at": now})
    own = inputs.book.runtime(
        candidate.project,
        candidate.shape,
        candidate.runtime_estimate_s,
        max_runtime_s=max_runtime_s,
    )
    pending = [*held_back(waiting_of(inputs.view))[0], candidate]
    arrivals, base = inputs.arrivals(pending)

    def runtime_of(workload: str) -> Runtime:
        return own if workload == candidate.id else base(workload)

    # At ``now``, as the cycle after the submission decides (the inputs may be a few seconds
    # older: ``latest_forecast_inputs``).
    at = max(inputs.at, now.timestamp())
    estimate = forecast(inputs.snapshot, pending, inputs.policy, at, runtime_of, arrivals=arrivals)
    return estimate[candidate.id]


def estimates_in_words(answer: WorkloadEstimates) -> str:
    """The answers that could start, soonest first, as a person says them: "4 x a100 now,
    or 4 x h100 in about 40 min"; "never" when none could. When one model alone would start
    sooner than the workload as asked, the as-asked start follows: that is what submitting
    the form as it stands gives."""
    said = []
    for model in answer.models:
        if model.never is not None or model.wait_s is None:
            continue
        said.append(f"{model.gpus:g} x {model.gpu_model} {_when(model.starts_now, model.wait_s)}")
    words = ", or ".join(dict.fromkeys(said)) or "never"
    asked = answer.as_asked
    sooner = [
        m
        for m in answer.models
        if m.wait_s is not None
        and m.never is None
        and (asked.wait_s is None or m.wait_s < asked.wait_s)
        and not (asked.starts_now and m.starts_now)
    ]
    if sooner:
        models = " or ".join(asked.gpu_models) or "any GPU model"
        when = "never" if asked.wait_s is None else _when(asked.starts_now, asked.wait_s)
        words += f"; as asked ({models}): {when}"
    where = answer.locality
    if where is not None:
        here = "never" if where.wait_s is None else _when(where.starts_now, where.wait_s)
        there = (
            "never"
            if where.elsewhere_wait_s is None
            else _when(where.elsewhere_starts_now, where.elsewhere_wait_s)
        )
        words += f"; with your volume: on {where.node} {here}, or elsewhere without your volume"
        words += f" {there}"
    return words


def _when(now: bool, wait_s: float) -> str:
    return "now" if now else f"in about {duration_in_words(wait_s)}"


def duration_in_words(seconds: float) -> str:
    """A wait as a person rounds it: minutes, else hours, else days."""
    minutes = max(1, round(seconds / 60))
    if minutes < 120:
        return f"{minutes} min"
    hours = round(minutes / 60)
    return f"{hours} h" if hours < 48 else f"{round(hours / 24)} days"


def _soonest(answer: ModelEstimate) -> tuple[object, ...]:
    """Never last; then beyond the horizon; then by start, price and model."""
    return (
        answer.never is not None,
        answer.start is None,
        answer.start or datetime.max.replace(tzinfo=UTC),
        answer.price_per_hour_minor if answer.price_per_hour_minor is not None else float("inf"),
        answer.gpu_model,
        answer.cluster or "",
    )


# --- Before an operator's change --------------------------------------------------------------


@dataclass(frozen=True)
class ReservationAsked:
    """A reservation an operator considers: ``gpus`` of ``gpu_model`` for the project's
    queue in [``starts_at``, ``ends_at``)."""

    project: Project
    gpu_model: str
    gpus: int
    starts_at: datetime
    ends_at: datetime


@dataclass(frozen=True)
class EstimateChange:
    """One waiting workload's estimate before the change and after it; ``delay_s``: how much
    later it starts (negative: sooner; None when either has no start)."""

    workload_id: str
    name: str
    project_id: str
    before: StartEstimate
    after: StartEstimate
    delay_s: float | None


@dataclass(frozen=True)
class ClusterWhatIf:
    """What a change would do to a cluster's waiting work: each workload whose estimate moved,
    and the totals."""

    cluster_id: uuid.UUID
    waiting: int
    changes: list[EstimateChange]
    delayed: int
    sooner: int
    mean_delay_s: float | None  # over the delayed
    max_delay_s: float | None
    never_after: int  # could start before, never after
    beyond_horizon_after: int  # had a start before, none within the forecast's horizon after


def cluster_what_if(
    *,
    actor: Actor,
    cluster: Cluster,
    drain: Sequence[uuid.UUID] = (),
    reservation: ReservationAsked | None = None,
) -> ClusterWhatIf:
    """The waiting work's estimates on the live state and with ``drain`` (nodes of the
    cluster) drained and ``reservation`` added, and what moved. Operators only."""
    actor.require(Action.FLEET_READ)
    if not drain and reservation is None:
        raise ValidationFailed("ask for a drain or a reservation", fields={"drain": ["required"]})
    drained = _drained(cluster, drain)
    now = timezone.now()
    inputs = latest_forecast_inputs(cluster.pk)
    pending, _ = held_back(waiting_of(inputs.view))
    arrivals, runtime_of = inputs.arrivals(pending)
    at = max(inputs.at, now.timestamp())  # the inputs may be a few seconds older
    before = forecast(inputs.snapshot, pending, inputs.policy, at, runtime_of, arrivals=arrivals)
    snapshot, policy = inputs.snapshot, inputs.policy
    if drained:
        snapshot = replace(
            snapshot,
            nodes=tuple(
                replace(n, schedulable=False) if n.name in drained else n for n in snapshot.nodes
            ),
        )
    if reservation is not None:
        policy = replace(
            policy,
            reservations=(*policy.reservations, _held(cluster, inputs.view, reservation, now)),
        )
    after = forecast(snapshot, pending, policy, at, runtime_of, arrivals=arrivals)
    return _compared(cluster, pending, before, after)


def _drained(cluster: Cluster, drain: Sequence[uuid.UUID]) -> set[str]:
    """The ids of the nodes to drain: each a node in service of this cluster."""
    found = {
        str(pk)
        for pk in nodes_in_service()
        .filter(cluster=cluster, pk__in=list(drain))
        .values_list("pk", flat=True)
    }
    missing = sorted(str(pk) for pk in drain if str(pk) not in found)
    if missing:
        raise ValidationFailed(
            f"no such node in service in cluster {cluster.slug}: {', '.join(missing)}",
            fields={"drain": ["unknown"]},
        )
    return found


def _held(
    cluster: Cluster, view: ClusterView, asked: ReservationAsked, now: datetime
) -> Reservation:
    """The engine's reservation for ``asked``: of a model the cluster has, in a window that
    ends after it starts and after now."""
    models = {n.gpu_model for n in view.nodes if n.gpu_model}
    if asked.gpu_model not in models:
        raise ValidationFailed(
            f"cluster {cluster.slug} has no {asked.gpu_model} nodes",
            fields={"reservation": ["gpu_model: unknown"]},
        )
    if asked.ends_at <= asked.starts_at or asked.ends_at <= now:
        raise ValidationFailed(
            "the window must end after it starts, and after now",
            fields={"reservation": ["ends_at: invalid"]},
        )
    return Reservation(
        id=WHAT_IF_RESERVATION,
        queue=str(asked.project.pk),
        gpu_model=asked.gpu_model,
        gpus=asked.gpus,
        starts_at=asked.starts_at.timestamp(),
        ends_at=asked.ends_at.timestamp(),
    )


def _moved(before: StartEstimate, after: StartEstimate) -> bool:
    return (before.start, before.earliest, before.latest) != (
        after.start,
        after.earliest,
        after.latest,
    ) or (Basis.NEVER in before.basis) != (Basis.NEVER in after.basis)


def _compared(
    cluster: Cluster,
    pending: Iterable[Request],
    before: dict[str, StartEstimate],
    after: dict[str, StartEstimate],
) -> ClusterWhatIf:
    moved = [r for r in pending if _moved(before[r.id], after[r.id])]
    rows = {
        str(pk): (name, str(project))
        for pk, name, project in Workload.objects.filter(pk__in=[r.id for r in moved]).values_list(
            "pk", "name", "project_id"
        )
    }
    changes = []
    for request in moved:
        was, now = before[request.id], after[request.id]
        delay = None if was.start is None or now.start is None else now.start - was.start
        name, project = rows.get(request.id, ("", request.project))
        changes.append(EstimateChange(request.id, name, project, was, now, delay))
    changes.sort(key=lambda c: (c.delay_s is not None, -(c.delay_s or 0.0), c.workload_id))
    delays = [c.delay_s for c in changes if c.delay_s is not None and c.delay_s > 0]
    lost = [c for c in changes if c.before.start is not None and c.after.start is None]
    return ClusterWhatIf(
        cluster_id=cluster.pk,
        waiting=len(before),
        changes=changes,
        delayed=len(delays),
        sooner=sum(1 for c in changes if c.delay_s is not None and c.delay_s < 0),
        mean_delay_s=sum(delays) / len(delays) if delays else None,
        max_delay_s=max(delays, default=None),
        never_after=sum(
            1 for c in changes if Basis.NEVER in c.after.basis and Basis.NEVER not in c.before.basis
        ),
        beyond_horizon_after=sum(1 for c in lost if Basis.NEVER not in c.after.basis),
    )
