"""Reserved capacity ordered and reserved directly by several clients at once, on PostgreSQL
with real commits: an order appends before its reservation checks the cluster's capacity,
so that check must not take a row lock after the log's lock."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from django.utils import timezone

from orders.models import Order, OrderStatus
from scheduler.models import Reservation
from tests.builders import client_with_key
from tests.builders.commerce import Customer, Shop
from tests.concurrency import at_once

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLIENTS = 3
ROUNDS = 4


def test_reserved_orders_and_reservations_at_once_all_succeed(
    customer: Customer, shop: Shop
) -> None:
    statuses: list[tuple[str, int]] = []
    start = timezone.now() + timedelta(days=1)

    def window(n: int) -> dict[str, str]:
        """A day of its own for every request: none is refused for capacity."""
        starts_at = start + timedelta(days=n)
        return {
            "starts_at": starts_at.isoformat(),
            "ends_at": (starts_at + timedelta(hours=1)).isoformat(),
        }

    def order(client_no: int) -> None:
        for i in range(ROUNDS):
            response = customer.post_order(
                offering="h100-reserved",
                price_plan="reserved",
                quantity=1,
                **window(2 * (client_no * ROUNDS + i)),
            )
            statuses.append(("order", response.status_code))

    def reserve(client_no: int) -> None:
        client = client_with_key(customer.keys["owner"])
        for i in range(ROUNDS):
            body: dict[str, Any] = {
                "project": str(customer.project.pk),
                "gpu_model": "h100",
                "gpus": 1,
                **window(2 * (client_no * ROUNDS + i) + 1),
            }
            response = client.post("/api/v1/reservations", body, format="json")
            statuses.append(("reservation", response.status_code))

    errors = at_once(
        [partial(order, n) for n in range(CLIENTS)] + [partial(reserve, n) for n in range(CLIENTS)]
    )

    assert [repr(e) for e in errors] == []
    assert sorted(set(statuses)) == [("order", 201), ("reservation", 201)]
    assert Order.objects.filter(status=OrderStatus.FULFILLED).count() == CLIENTS * ROUNDS
    assert Reservation.objects.count() == 2 * CLIENTS * ROUNDS
