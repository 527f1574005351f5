"""The rules of new work that are the organization's: its standing (active, payment, the
month's GPU-hours) and the approval threshold. Every way of starting work (an order, the
workloads and reservations API, an admin action) passes them before it writes.

Reads only, no locks: they are checked before the write's transaction, against the other
apps' answers through ``hooks``. Work already running is never stopped by any of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from scheduler import hooks
from scheduler.errors import ApprovalRequired, GpuHoursExhausted, PaymentRequired, TooMuchWaiting
from scheduler.models import WAITING_STATUSES, Workload
from tenants.errors import OrganizationSuspended
from tenants.models import Organization, Project, Quota

MILLI_GPU_SECONDS_PER_GPU_HOUR = 3_600_000


def check_standing(
    *,
    organization: Organization,
    project: Project,
    gpu_models: Sequence[str],
    quotas: Sequence[Quota] | None = None,
) -> None:
    """The organization may start new work in ``project`` on one of ``gpu_models`` (none:
    any model): it is active, no payment check (billing's dunning, the budget's hard stop)
    objects, and no quota of those models has spent its GPU-hours this month. Work already
    running is never stopped by any of these. ``quotas``: the organization's own and the
    project's, if the caller read them already."""
    if not organization.is_active:
        raise OrganizationSuspended(
            f"organization {organization.slug} is suspended: it can read but start nothing"
        )
    refusal = hooks.payment_check.first(organization)
    if refusal:
        raise PaymentRequired(refusal, fields={"organization": [refusal]})
    _check_gpu_hours(organization, project, gpu_models, quotas)


def _check_gpu_hours(
    organization: Organization,
    project: Project,
    gpu_models: Sequence[str],
    quotas: Sequence[Quota] | None,
) -> None:
    """A quota's ``monthly_gpu_hours`` holds the UTC month's metered usage of its model (the
    organization's, or the project's for a project's quota). Work that may run on a spent
    model is refused, even if it names others too: the engine may place it on any of them."""
    if quotas is None:
        quotas = list(
            Quota.objects.filter(
                Q(project__isnull=True) | Q(project=project), organization=organization
            )
        )
    capped = sorted(
        (
            q
            for q in quotas
            if q.monthly_gpu_hours is not None and (not gpu_models or q.gpu_model in gpu_models)
        ),
        key=lambda q: (q.project_id is not None, q.gpu_model),  # the organization's first
    )
    now = timezone.now()
    used: dict[uuid.UUID | None, dict[str, int]] = {}
    for quota in capped:
        if quota.project_id not in used:
            metered = hooks.usage_meter.first(organization.pk, quota.project_id, now)
            used[quota.project_id] = dict(metered or {})
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


def check_waiting(*, organization: Organization, adding: Mapping[Project, int]) -> None:
    """Work waits in a queue the scheduler orders every cycle: one key queueing arrays of
    10,000 tasks again and again would make every cycle and estimate slower for everyone. So
    an organization and each project may have only so many workloads waiting (pending or
    admitted); a submission of ``adding`` more (per project) past that is refused whole.
    Counted without a lock, as the other checks: two submissions at once may pass it by one."""
    waiting = Workload.objects.filter(organization_id=organization.pk, status__in=WAITING_STATUSES)
    limits: list[tuple[str, str, QuerySet[Workload], int, int]] = [
        (
            "organization",
            organization.slug,
            waiting,
            settings.WAITING_WORKLOADS_PER_ORGANIZATION,
            sum(adding.values()),
        )
    ]
    for project, more in adding.items():
        rows = waiting.filter(project_id=project.pk)
        limits.append(("project", project.slug, rows, settings.WAITING_WORKLOADS_PER_PROJECT, more))
    for scope, slug, rows, limit, more in limits:
        count = rows.count()
        if count + more <= limit:
            continue
        message = (
            f"{scope} {slug} has {count} workloads waiting, of at most {limit}: {more} more"
            " would pass it; wait for some to start, or cancel some"
        )
        raise TooMuchWaiting(
            message,
            fields={scope: [message]},
            details={"scope": scope, "waiting": count, "limit": limit, "adding": more},
        )


def check_approval(gpus: int, field: str, order_id: uuid.UUID | None) -> None:
    """Work of more GPUs than the approval threshold starts only from an order, which an
    operator approved (orders at most the threshold are approved at once)."""
    threshold = hooks.approval_threshold.first()
    if order_id is not None or threshold is None or gpus <= threshold:
        return
    message = (
        f"{gpus} GPUs is over the approval threshold of {threshold}: order it"
        " (POST /api/v1/orders), an operator approves it"
    )
    raise ApprovalRequired(
        message, fields={field: [message]}, details={"gpus": gpus, "threshold": threshold}
    )
