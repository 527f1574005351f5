"""A fulfilled order closes when what it became ends: its workload (a final status) or its
reservation (cancelled, or its window over); a hook that was lost is made up for by the
periodic ``orders.close_ended``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from orders import services, tasks
from orders.models import Order, OrderStatus
from scheduler import services as scheduler
from scheduler.models import Reservation, Workload
from tests.builders import run
from tests.builders.commerce import Customer, order

pytestmark = pytest.mark.django_db


def _reserved(customer: Customer, hours: float = 1) -> Order:
    now = timezone.now()
    return order(
        customer.project,
        "h100-reserved",
        plan="reserved",
        quantity=2,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=hours),
    )


def _status(of: Order) -> tuple[str, str]:
    fresh = Order.objects.get(pk=of.pk)
    return fresh.status, fresh.status_reason


def test_an_order_closes_when_its_reservation_is_cancelled(
    customer: Customer, django_capture_on_commit_callbacks: Any
) -> None:
    fulfilled = _reserved(customer)
    reservation = Reservation.objects.get(order_id=fulfilled.pk)

    with django_capture_on_commit_callbacks(execute=True):
        run(scheduler.reservation_cancel, reservation=reservation, reason="plans changed")

    assert _status(fulfilled) == (OrderStatus.CLOSED, "reservation cancelled: plans changed")


def test_an_order_closes_when_its_reservations_window_is_over(customer: Customer) -> None:
    fulfilled = _reserved(customer, hours=1)
    ongoing = _reserved(customer, hours=3)

    closed = run(services.orders_close_ended, now=timezone.now() + timedelta(hours=2))

    assert closed == 1
    status, reason = _status(fulfilled)
    assert status == OrderStatus.CLOSED
    assert reason.startswith("reservation ended at ")
    assert _status(ongoing)[0] == OrderStatus.FULFILLED


def test_a_lost_hook_is_made_up_for_by_the_periodic_task(customer: Customer) -> None:
    fulfilled = order(customer.project, "1xh100")
    workload = Workload.objects.get(order_id=fulfilled.pk)
    # Outside a committed transaction the on-commit hook never runs: as if it failed.
    run(scheduler.workload_cancel, workload=workload, reason="done")
    assert _status(fulfilled)[0] == OrderStatus.FULFILLED

    closed = tasks.close_ended()
    again = tasks.close_ended()

    assert (closed, again) == (1, 0)
    assert _status(fulfilled) == (OrderStatus.CLOSED, f"workload {workload.name} cancelled")
    schedule = settings.CELERY_BEAT_SCHEDULE["orders-close-ended"]
    assert schedule["task"] == "orders.close_ended"


def test_orders_whose_work_goes_on_stay_open(customer: Customer) -> None:
    fulfilled = order(customer.project, "1xh100")

    assert run(services.orders_close_ended) == 0
    assert _status(fulfilled)[0] == OrderStatus.FULFILLED
