"""Periodic budget checks: thresholds are crossed by time passing, with no event to wake on."""

from __future__ import annotations

from celery import shared_task

from metering import services
from neocloud.core.transactions import atomic_with_retry


@shared_task(name="metering.budgets_check")
def budgets_check() -> int:
    """Record the budget thresholds reached; how many."""
    return len(atomic_with_retry(services.budgets_check))
