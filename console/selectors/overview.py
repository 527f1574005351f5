"""The overview: work held and waiting, GPU-hours this month; for who may read invoices, the
month's spend and open invoices; budgets against their limits, and alerts (budget thresholds
reached this month, a spent hard stop, payment problems)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count
from django.utils import timezone

from billing.selectors import payment_refusal
from console.guard import Console
from console.selectors import billing
from metering.selectors import month_usage_by_model
from scheduler.models import Allocation, Workload, WorkloadStatus
from tenants.access import Action

WAITING = (WorkloadStatus.PENDING, WorkloadStatus.ADMITTED)


@dataclass(frozen=True)
class Overview:
    gpus_held: dict[str, float]  # GPU model -> GPUs held now
    running: int
    waiting: int
    gpu_hours_month: dict[str, float]  # GPU model -> GPU-hours this month
    spending: Spending | None  # None: the member may not read invoices
    budgets: list[billing.BudgetRow]
    alerts: list[str]


@dataclass(frozen=True)
class Spending:
    month_to_date: list[str] | None  # per currency; None: some usage has no price yet
    open_invoices: billing.OpenInvoices


def overview(console: Console) -> Overview:
    workloads = console.scoped(Workload.objects.all(), Action.WORKLOAD_READ)
    by_status = dict(workloads.values_list("status").annotate(n=Count("id")).order_by())
    held: dict[str, float] = defaultdict(float)
    live = console.scoped(Allocation.objects.all(), Action.WORKLOAD_READ).filter(
        released_at__isnull=True
    )
    for model, milli in live.values_list("gpu_model", "gpu_milli"):
        held[model or "any"] += milli / 1000
    hours: dict[str, float] = {}
    if console.organization is not None:
        month = month_usage_by_model(console.organization.pk, None, timezone.now())
        hours = {model: milli / 1000 / 3600 for model, milli in sorted(month.items())}
    spending, budgets, alerts = _money(console)
    return Overview(
        gpus_held=dict(sorted(held.items())),
        running=by_status.get(WorkloadStatus.RUNNING, 0),
        waiting=sum(by_status.get(s, 0) for s in WAITING),
        gpu_hours_month=hours,
        spending=spending,
        budgets=budgets,
        alerts=alerts,
    )


def _money(console: Console) -> tuple[Spending | None, list[billing.BudgetRow], list[str]]:
    if console.organization is None:
        return None, [], []
    now = timezone.now()
    spending = None
    if console.can(Action.INVOICE_READ):
        spending = Spending(
            month_to_date=billing.spent_month_to_date(console, now),
            open_invoices=billing.open_invoices(console),
        )
    budgets = billing.budgets(console, now)
    alerts = [
        f"The budget of {row.scope} reached {row.alerts[-1]} % this month:"
        f" {row.used} of {row.limit} GPU-hours"
        + ("; new work is refused until next month or a higher budget" if row.stopping else "")
        + "."
        for row in budgets
        if row.alerts or row.stopping
    ]
    refused = payment_refusal(console.organization)
    if refused:
        alerts.append(f"New work is refused: {refused}.")
    return spending, budgets, alerts
