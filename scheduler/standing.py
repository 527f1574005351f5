"""An organization's standing (active, payment, the month's GPU-hours), read where work is
submitted (``check_standing``, which the services call before they write) and again where
it starts: every cycle, forecast, dry run and what-if holds back the waiting work of an
organization that may not start work now (``held_back``), with a pending reason of its own.

Reads only, no locks, against the other apps' answers through ``hooks``. Work already
running is never stopped by any of them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from neocloud.core.errors import ApplicationError
from scheduler import hooks
from scheduler.engine.model import PendingReason, ReasonCode, Request
from scheduler.errors import GpuHoursExhausted, PaymentRequired
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


# A cycle runs every few seconds: an organization's standing is read again at most this often.
STANDING_TTL_S = 5.0
_standing: dict[tuple[str, str, tuple[str, ...]], tuple[float, str]] = {}


def held_back(pending: Sequence[Request]) -> tuple[list[Request], dict[str, PendingReason]]:
    """``pending`` split into the work that may start and the work held back, with its
    reason: work queued before its organization was suspended, fell into dunning or past its
    budget's hard stop, or spent its month's GPU-hours waits, and says why. What a
    submission would be refused for (``check_standing``), read again where work starts."""
    keys = {(r.organization, r.project, r.gpu_models) for r in pending}
    refusals = _refusals(keys)
    if not any(refusals.values()):
        return list(pending), {}
    startable, held = [], {}
    for request in pending:
        refusal = refusals[(request.organization, request.project, request.gpu_models)]
        if refusal:
            held[request.id] = PendingReason(ReasonCode.STANDING, f"held back: {refusal}")
        else:
            startable.append(request)
    return startable, held


def _refusals(
    keys: set[tuple[str, str, tuple[str, ...]]],
) -> dict[tuple[str, str, tuple[str, ...]], str]:
    now = time.monotonic()
    stale = {
        key for key in keys if now - _standing.get(key, (-STANDING_TTL_S, ""))[0] >= STANDING_TTL_S
    }
    if stale:
        organizations = Organization.objects.in_bulk({uuid.UUID(o) for o, _, _ in stale})
        projects = Project.objects.in_bulk({uuid.UUID(p) for _, p, _ in stale})
        for key in stale:
            organization_id, project_id, models = key
            organization = organizations.get(uuid.UUID(organization_id))
            project = projects.get(uuid.UUID(project_id))
            refusal = ""
            try:
                if organization is not None and project is not None:
                    check_standing(organization=organization, project=project, gpu_models=models)
            except ApplicationError as error:
                refusal = error.message
            _standing[key] = (now, refusal)
    return {key: _standing[key][1] for key in keys}


def forget_standing() -> None:
    """Read every standing again at the next cycle (after a suspension, a payment, a test)."""
    _standing.clear()
