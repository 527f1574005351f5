"""The rules of new work that are the organization's: its standing (``check_standing``, read
in ``scheduler.standing``, which the cycle reads again), the waiting bound and the
approval threshold. Every way of starting work (an order, the workloads and reservations API,
an admin action) passes them before it writes.

Reads only, no locks: they are checked before the write's transaction, against the other
apps' answers through ``hooks``. Work already running is never stopped by any of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from django.conf import settings
from django.db.models import Count, Q

from neocloud.core import ratelimit
from scheduler import hooks
from scheduler.errors import ApprovalRequired, ForecastsExhausted, TooMuchWaiting
from scheduler.models import WAITING_STATUSES, Workload
from scheduler.standing import check_standing
from tenants.models import Organization, Project

__all__ = ["check_approval", "check_forecast_rate", "check_standing", "check_waiting"]


def check_waiting(*, organization: Organization, adding: Mapping[Project, int]) -> None:
    """Work waits in a queue the scheduler orders every cycle: one key queueing arrays of
    10,000 tasks again and again would make every cycle and estimate slower for everyone. So
    an organization and each project may have only so many workloads waiting (pending or
    admitted); a submission of ``adding`` more (per project) past that is refused whole.
    Counted without a lock, as the other checks: two submissions at once may pass it by one."""
    waiting = Workload.objects.filter(organization_id=organization.pk, status__in=WAITING_STATUSES)
    counts = waiting.aggregate(  # one query, whatever the projects
        total=Count("pk"),
        **{str(p.pk): Count("pk", filter=Q(project_id=p.pk)) for p in adding},
    )
    limits = [
        (
            "organization",
            organization.slug,
            counts["total"],
            settings.WAITING_WORKLOADS_PER_ORGANIZATION,
            sum(adding.values()),
        )
    ]
    for project, more in adding.items():
        limits.append(
            (
                "project",
                project.slug,
                counts[str(project.pk)],
                settings.WAITING_WORKLOADS_PER_PROJECT,
                more,
            )
        )
    for scope, slug, count, limit, more in limits:
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


def check_approval(
    gpus: int, field: str, order_id: uuid.UUID | None, *, reserved: int | None = None
) -> None:
    """Work of more GPUs than the approval threshold starts only from an order, which an
    operator approved (orders at most the threshold are approved at once). A reservation
    counts with the ``reserved`` GPUs its organization already holds of that model at once in
    its window: reservations split in parts would pass it otherwise."""
    threshold = hooks.approval_threshold.first()
    if order_id is not None or threshold is None or gpus + (reserved or 0) <= threshold:
        return
    held = f", with the {reserved} already reserved in that window," if reserved else ""
    message = (
        f"{gpus} GPUs{held} is over the approval threshold of {threshold}: order it"
        " (POST /api/v1/orders), an operator approves it"
    )
    details = {"gpus": gpus, "threshold": threshold}
    if reserved is not None:  # a reservation's check
        details["reserved"] = reserved
    raise ApprovalRequired(message, fields={field: [message]}, details=details)


def check_forecast_rate(organization_id: uuid.UUID) -> None:
    """An estimate or a dry run runs the engine over the cluster's whole line (seconds of CPU
    at 20,000 waiting), so an organization may ask for so many a minute, through the API and
    the console alike."""
    limit = settings.FORECASTS_PER_MINUTE_PER_ORGANIZATION
    if ratelimit.allow("forecasts", str(organization_id), limit=limit, window_s=60):
        return
    raise ForecastsExhausted(
        f"more than {limit} estimates and dry runs this minute for this organization: ask"
        " again in a minute",
        details={"limit_per_minute": limit, "retry_after_s": 60},
    )
