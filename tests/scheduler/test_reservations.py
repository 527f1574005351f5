"""Reservations give away nothing (issue 30): work on one takes at most its GPUs; the approval
threshold and the organization's cap count what it already holds at once; a late cancellation
leaves the window billed, and the answer says so."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from billing import selectors as billing
from orders import services as orders
from scheduler import services
from scheduler.models import Reservation, Workload, WorkloadWait
from tenants.models import Role
from tests.builders import Builder, run
from tests.builders import commerce as commerce_builders
from tests.builders.commerce import Customer, Shop
from tests.scheduler.conftest import Tenant, ready_fleet, submitted

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def shop() -> Shop:
    return commerce_builders.shop()


@pytest.fixture
def customer(build: Builder, shop: Shop) -> Customer:
    return commerce_builders.customer(build)


def _window(hours_from_now: float = 1, hours: float = 2) -> tuple[datetime, datetime]:
    start = timezone.now() + timedelta(hours=hours_from_now)
    return start, start + timedelta(hours=hours)


def _post_reservation(
    customer: Customer, gpus: int, window: tuple[datetime, datetime], model: str = "h100"
) -> Any:
    return customer.client(Role.MEMBER).post(
        "/api/v1/reservations",
        {
            "project": str(customer.project.pk),
            "gpu_model": model,
            "gpus": gpus,
            "starts_at": window[0].isoformat(),
            "ends_at": window[1].isoformat(),
        },
        format="json",
    )


def _reserve(project: Any, gpus: int, window: tuple[datetime, datetime]) -> Reservation:
    reservation: Reservation = run(
        services.reservation_create,
        project=project,
        gpu_model="h100",
        gpus=gpus,
        starts_at=window[0],
        ends_at=window[1],
    )
    return reservation


# --- work on a reservation takes at most its GPUs ----------------------------------------------


def test_a_workload_asking_more_than_its_reservation_holds_is_refused(customer: Customer) -> None:
    reservation = _reserve(customer.project, 1, _window(0, 2))

    response = customer.client(Role.MEMBER).post(
        "/api/v1/workloads",
        {
            "project": str(customer.project.pk),
            "name": "big",
            "gpu_models": ["h100"],
            "gpus_per_node": 8,
            "reservation": str(reservation.pk),
        },
        format="json",
    )

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["fields"] == {"gpus_per_node": ["exceeds_reservation"]}
    assert error["message"] == (
        f"the workload asks 8 GPUs at least; reservation {reservation.pk} holds 1"
    )
    assert not Workload.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_workloads_that_each_fit_the_reservation_do_not_run_together(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    reservation = _reserve(tenant.project, 6, _window(0, 2))

    first = submitted(tenant.project, "a", gpus=4, reservation=reservation.pk)
    second = submitted(tenant.project, "b", gpus=4, reservation=reservation.pk)

    assert first.status == "running"
    assert second.status in {"pending", "admitted"}  # waiting, and not granted
    assert not second.allocations.exists()
    wait = WorkloadWait.objects.get(workload_id=second.pk)
    assert wait.code == "reservation_full"
    assert wait.message == f"reservation {reservation.pk} holds 6 GPUs; 2 free on it, 4 asked"


# --- the approval threshold and the cap count what is held at once -----------------------------


def test_eight_and_eight_overlapping_over_a_threshold_of_eight_needs_approval(
    customer: Customer,
) -> None:
    run(orders.approval_threshold_set, threshold_gpus=8)
    window = _window(1, 2)

    first = _post_reservation(customer, 8, window)
    second = _post_reservation(customer, 8, _window(2, 2))  # overlaps the first's second hour
    later = _post_reservation(customer, 8, _window(3, 2))  # after the first

    assert first.status_code == 201, first.json()
    assert second.status_code == 403, second.json()
    error = second.json()["error"]
    assert error["code"] == "approval_required"
    assert error["message"].startswith(
        "8 GPUs, with the 8 already reserved in that window, is over the approval threshold of 8"
    )
    assert error["details"] == {"gpus": 8, "reserved": 8, "threshold": 8}
    assert later.status_code == 201, later.json()
    assert Reservation.objects.count() == 2


def test_an_organization_holds_at_most_its_cap_reserved_at_once(
    customer: Customer, settings: Any
) -> None:
    settings.RESERVED_GPUS_PER_ORGANIZATION = 10
    window = _window(1, 2)

    first = _post_reservation(customer, 6, window)
    beside = _post_reservation(customer, 2, _window(4, 2))  # not at the same time
    past_it = _post_reservation(customer, 6, _window(2, 2))
    to_it = _post_reservation(customer, 4, _window(2, 2))

    assert [r.status_code for r in (first, beside, to_it)] == [201] * 3
    assert past_it.status_code == 409, past_it.json()
    error = past_it.json()["error"]
    assert error["code"] == "too_much_reserved"
    assert error["fields"] == {"gpus": [error["message"]]}
    assert error["message"] == (
        f"organization {customer.organization.slug} holds 6 GPUs reserved at once in that"
        " window, of at most 10: 6 more would pass it"
    )
    assert Reservation.objects.count() == 3


# --- a late cancellation leaves the window billed ----------------------------------------------


@pytest.mark.parametrize(
    ("starts_in_hours", "charged"),
    [
        pytest.param(25, False, id="before-the-notice-period-free"),
        pytest.param(23, True, id="inside-the-notice-period-billed"),
        pytest.param(0, True, id="after-the-start-billed"),
    ],
)
def test_a_cancellation_inside_the_notice_period_keeps_the_window_billed(
    customer: Customer, starts_in_hours: float, charged: bool
) -> None:
    window = _window(starts_in_hours, 2)
    reservation = _reserve(customer.project, 2, window)

    response = customer.client(Role.MEMBER).post(
        f"/api/v1/reservations/{reservation.pk}/cancel", {}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert (response.json()["status"], response.json()["cancellation_charged"]) == (
        "cancelled",
        charged,
    )
    billed = billing.reservation_windows(
        customer.organization.pk,
        window[0] - timedelta(days=1),
        window[1] + timedelta(days=1),
        billing.regions_of_clusters(),
    )
    assert [w.reservation_id for w in billed] == ([reservation.pk] if charged else [])
