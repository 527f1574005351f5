"""Budgets and their alerts.

Budgets are in GPU-hours (stored as milli-GPU-seconds), not money: metering knows usage but
not prices, which are billing's and change by plan and region; a GPU-hour budget holds
whatever the price list does. Alerts at 50, 80 and 100 % of a UTC month's usage are events,
recorded once per threshold and month by ``budgets_check`` (run periodically) and logged. A
hard stop refuses new work (orders, workloads, reservations) through ``scheduler.hooks``
once an organization's budget is spent (``selectors.budget_refusal``); running work is never
stopped by it. Usage for billing is read from ``selectors.usage_lines``.

Concurrency: a budget's events are appended at the version read just before (its stream's
in ``budget_set``, its row's in ``budget_clear`` and ``budgets_check``), so of two writers of
one budget (or two checkers recording one alert) one conflicts, and its retry sees the
other's write.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from events import store
from metering import events as mev
from metering import intervals, selectors
from metering.models import Budget
from neocloud.core.errors import ValidationFailed
from tenants.access import Action, Actor
from tenants.models import Organization, Project

logger = logging.getLogger(__name__)

THRESHOLDS = (50, 80, 100)
SYSTEM = Actor.system_actor("metering")


def budget_set(
    *,
    actor: Actor,
    organization: Organization,
    gpu_hours: Decimal,
    hard_stop: bool = False,
    project: Project | None = None,
) -> Budget:
    """Set (create or replace) the monthly budget of an organization or a project.

    A hard stop is the organization's only: new work is checked per organization
    (``scheduler.hooks``), so a project's budget alerts but cannot refuse."""
    actor.require(Action.ORGANIZATION_UPDATE, organization)
    if project is not None and project.organization_id != organization.id:
        raise ValidationFailed("project not in this organization", fields={"project": ["other"]})
    if hard_stop and project is not None:
        raise ValidationFailed(
            "a hard stop is set on the organization's budget, not a project's",
            fields={"hard_stop": ["only on an organization's budget"]},
        )
    limit = Decimal(gpu_hours) * intervals.MILLI_GPU_SECONDS_PER_GPU_HOUR
    if limit <= 0 or limit != limit.to_integral_value():
        raise ValidationFailed(
            "gpu_hours must be positive, in steps of 0.001",
            fields={"gpu_hours": ["positive, at most 3 decimal places"]},
        )
    budget_id = selectors.budget_id_for(organization.id, project.pk if project else None)
    store.append(
        mev.BUDGET_STREAM,
        str(budget_id),
        [
            mev.BudgetSet(
                budget_id=budget_id,
                organization_id=organization.id,
                project_id=project.pk if project else None,
                limit_milli_gpu_seconds=int(limit),
                hard_stop=hard_stop,
            )
        ],
        expected_version=store.stream_version(mev.BUDGET_STREAM, str(budget_id)),
        metadata=actor.metadata(organization.id),
    )
    return Budget.objects.get(pk=budget_id)


def budget_clear(*, actor: Actor, budget: Budget) -> None:
    """Remove a budget; alerts already recorded stay in the log."""
    organization = Organization.objects.get(pk=budget.organization_id)
    actor.require(Action.ORGANIZATION_UPDATE, organization)
    store.append(
        mev.BUDGET_STREAM,
        str(budget.id),
        [
            mev.BudgetCleared(
                budget_id=budget.id,
                organization_id=budget.organization_id,
                project_id=budget.project_id,
            )
        ],
        expected_version=budget.version,
        metadata=actor.metadata(organization.id),
    )


def budgets_check(*, now: datetime | None = None) -> list[mev.BudgetThresholdReached]:
    """Record every threshold reached this UTC month and not recorded yet, one append per
    budget with the version its row was read at (two checkers at once: one conflicts, and
    on retry finds the alert recorded). Each alert is logged once its append commits."""
    now = now or timezone.now()
    month = intervals.month_of(now)[0].strftime("%Y-%m")
    reached: list[mev.BudgetThresholdReached] = []
    for budget in Budget.objects.order_by("id"):
        used = selectors.month_usage(
            organization_id=budget.organization_id, project_id=budget.project_id, now=now
        )
        recorded = selectors.budget_alerts(budget, month)
        alerts = [
            mev.BudgetThresholdReached(
                budget_id=budget.id,
                organization_id=budget.organization_id,
                project_id=budget.project_id,
                month=month,
                threshold_percent=threshold,
                used_milli_gpu_seconds=used,
                limit_milli_gpu_seconds=budget.limit_milli_gpu_seconds,
            )
            for threshold in THRESHOLDS
            if threshold not in recorded
            and used * 100 >= budget.limit_milli_gpu_seconds * threshold
        ]
        if not alerts:
            continue
        store.append(
            mev.BUDGET_STREAM,
            str(budget.id),
            alerts,
            expected_version=budget.version,
            metadata=SYSTEM.metadata(budget.organization_id),
        )
        for alert in alerts:
            transaction.on_commit(lambda alert=alert: _log_alert(alert))  # type: ignore[misc]
        reached += alerts
    return reached


def _log_alert(alert: mev.BudgetThresholdReached) -> None:
    scope = f"project {alert.project_id}" if alert.project_id else "organization"
    logger.warning(
        "budget alert: organization %s, %s reached %d%% of its %s budget: %s of %s GPU-hours",
        alert.organization_id,
        scope,
        alert.threshold_percent,
        alert.month,
        intervals.gpu_hours(alert.used_milli_gpu_seconds),
        intervals.gpu_hours(alert.limit_milli_gpu_seconds),
    )
