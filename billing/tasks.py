"""Billing's periodic tasks: each calls one service."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from billing import services


@shared_task(name="billing.close_previous_period")
def close_previous_period() -> dict[str, object]:
    period = services.Period.of(timezone.now()).previous
    report = services.period_close(actor=services.SYSTEM, period=period)
    return {"period": report.period, "invoices": len(report.invoices), "refused": report.refused}


@shared_task(name="billing.collect_due")
def collect_due() -> int:
    return services.collect_due()
