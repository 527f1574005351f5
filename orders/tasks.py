"""Ordering's periodic task: orders close when what they became ends."""

from __future__ import annotations

from celery import shared_task

from orders import services
from tenants.access import Actor


@shared_task(name="orders.close_ended", ignore_result=True)
def close_ended() -> int:
    """Close fulfilled orders whose workload or reservation has ended: a reservation's window
    runs out without an event, and an on-commit hook that failed is not retried."""
    return services.orders_close_ended(actor=Actor.system_actor("orders"))
