"""Queues and quotas, and reservations: the scheduler's own reads (``queues_of``, the
reservations' rows) under the console's scoping, with this month's metered GPU-hours beside
the quotas that cap them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from console.guard import Console
from metering.intervals import gpu_hours, month_of
from metering.models import OpenAllocation, UsageSlice
from metering.selectors import usage_by
from scheduler.models import Queue, Reservation, ReservationStatus
from scheduler.selectors import default_cohort, queues_of
from tenants.access import Action
from tenants.models import Project, Quota

TIMELINE_DAYS = 14
ENDED_SHOWN = 20


@dataclass(frozen=True)
class ModelQuota:
    """One GPU model of a project's queue: held now against ``max_gpus``, and this month's
    GPU-hours against ``monthly_gpu_hours``; the quota is the project's own, else its
    organization's (``quota_of``), as the scheduler reads it."""

    gpu_model: str
    held: float
    max_gpus: int | None
    quota_of: str  # "project", "organization" or "" (no quota: not limited)
    borrowed: float  # held beyond max_gpus: idle quota of the cohort's other queues
    lendable: float  # of max_gpus, idle and lent to the cohort (at most lending_limit)
    month_gpu_hours: str
    monthly_gpu_hours: int | None


@dataclass(frozen=True)
class ProjectQueue:
    project: Project
    cohort: str
    organization_cohort: bool  # the default: all of the organization's projects
    borrowing_limit: int | None
    lending_limit: int | None
    weight: float
    depth: int  # workloads waiting
    running: int  # workloads holding GPUs
    models: list[ModelQuota]


def project_queues(console: Console, now: datetime) -> list[ProjectQueue]:
    """Each project of the current organization the member sees, with its queue: the API's
    figures (``GET /api/v1/queues``), and every model a visible quota names or the project
    used this month."""
    visible = console.scoped(Project.objects.all(), Action.PROJECT_READ)
    queues = queues_of(visible)
    if not queues:
        return []
    projects = {p.pk: p for p in Project.objects.filter(pk__in=[q["project"] for q in queues])}
    quotas = {
        (q.project_id, q.gpu_model): q
        for q in console.scoped(Quota.objects.all(), Action.QUOTA_READ)
    }
    month = _month_usage(console, now)
    configured = set(Queue.objects.filter(project__in=projects).values_list("project", flat=True))
    result = []
    for queue in queues:
        project = projects[queue["project"]]
        # The engine's cohort holds the queues configured or with work (``cluster_policy``):
        # the others lend nothing.
        lends = project.pk in configured or queue["depth"] + queue["running"] > 0
        held = {u["gpu_model"]: u["used"] for u in queue["usage"]}
        named = {model for owner, model in quotas if owner in (None, project.pk)}
        models = []
        for model in sorted(set(held) | named | set(month.get(project.pk, {}))):
            quota = quotas.get((project.pk, model)) or quotas.get((None, model))
            # The month's usage of whom the quota caps: the project, or its organization.
            of = quota.project_id if quota else project.pk
            used = month.get(of, {}).get(model, 0)
            models.append(_model_quota(model, held.get(model, 0.0), quota, queue, used, lends))
        result.append(
            ProjectQueue(
                project=project,
                cohort=queue["cohort"],
                organization_cohort=queue["cohort"] == default_cohort(project),
                borrowing_limit=queue["borrowing_limit"],
                lending_limit=queue["lending_limit"],
                weight=queue["weight"],
                depth=queue["depth"],
                running=queue["running"],
                models=models,
            )
        )
    return result


def _model_quota(
    model: str,
    held: float,
    quota: Quota | None,
    queue: dict[str, Any],
    used: int,
    lends: bool,
) -> ModelQuota:
    """Borrowing by the engine's rule (``scheduler.engine.quota``): a queue borrows what it
    holds beyond its nominal quota, and lends what it leaves idle of it, up to its
    ``lending_limit``."""
    if quota is None:
        return ModelQuota(model, held, None, "", 0.0, 0.0, gpu_hours(used), None)
    borrowed, lendable = borrowing(held, quota.max_gpus, queue["lending_limit"], lends)
    return ModelQuota(
        gpu_model=model,
        held=held,
        max_gpus=quota.max_gpus,
        quota_of="project" if quota.project_id else "organization",
        borrowed=borrowed,
        lendable=lendable,
        month_gpu_hours=gpu_hours(used),
        monthly_gpu_hours=quota.monthly_gpu_hours,
    )


def borrowing(
    held: float, max_gpus: int | None, lending_limit: int | None, lends: bool
) -> tuple[float, float]:
    """What a queue borrows (held beyond its nominal quota) and lends (its idle quota, at
    most ``lending_limit``; nothing unless it ``lends``), by ``scheduler.engine.quota``'s
    rule; no quota: neither."""
    if max_gpus is None:
        return 0.0, 0.0
    idle = max(0.0, max_gpus - held) if lends else 0.0
    lendable = idle if lending_limit is None else min(idle, float(lending_limit))
    return max(0.0, held - max_gpus), lendable


def _month_usage(console: Console, now: datetime) -> dict[UUID | None, dict[str, int]]:
    """Milli-GPU-seconds of the UTC month so far per GPU model, per project and (key None)
    for the whole organization: what monthly quotas are held against (``check_standing``)."""
    if console.organization is None:
        return {}
    organization_id = console.organization.pk
    start, end = month_of(now)
    totals = usage_by(
        slices=UsageSlice.objects.filter(organization_id=organization_id),
        open_allocations=OpenAllocation.objects.filter(organization_id=organization_id),
        start=start,
        end=end,
        group_by=("project", "gpu_model"),
        now=now,
    )
    month: dict[UUID | None, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (project_id, model), total in totals.items():
        month[project_id][model] += total
        month[None][model] += total
    return month


@dataclass(frozen=True)
class Bar:
    """A reservation's window on the timeline, in percent of its width."""

    reservation: Reservation
    offset: float
    width: float


@dataclass(frozen=True)
class Reservations:
    current: list[Reservation]  # not ended yet (cancelled ones too, saying so)
    ended: list[Reservation]  # the latest few
    days: int
    timeline_start: datetime
    timeline_end: datetime
    bars: list[Bar]


def reservations(console: Console, now: datetime) -> Reservations:
    """The current organization's reservations the member sees (the API's scoping), and the
    active ones' windows across the next ``TIMELINE_DAYS`` days from today's UTC midnight."""
    rows = console.scoped(Reservation.objects.all(), Action.WORKLOAD_READ).select_related("project")
    current = list(rows.filter(ends_at__gt=now).order_by("starts_at", "id"))
    ended = list(rows.filter(ends_at__lte=now).order_by("-ends_at", "id")[:ENDED_SHOWN])
    start = datetime.combine(now.astimezone(UTC).date(), datetime.min.time(), tzinfo=UTC)
    end = start + timedelta(days=TIMELINE_DAYS)
    span = (end - start).total_seconds()
    bars = []
    for reservation in current:
        if reservation.status != ReservationStatus.ACTIVE or reservation.starts_at >= end:
            continue
        left = max(reservation.starts_at, start)
        right = min(reservation.ends_at, end)
        bars.append(
            Bar(
                reservation=reservation,
                offset=round((left - start).total_seconds() / span * 100, 2),
                width=max(0.5, round((right - left).total_seconds() / span * 100, 2)),
            )
        )
    return Reservations(
        current=current,
        ended=ended,
        days=TIMELINE_DAYS,
        timeline_start=start,
        timeline_end=end,
        bars=bars,
    )
