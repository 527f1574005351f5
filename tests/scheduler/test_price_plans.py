"""Prices are the server's decision: a workload's plan follows from what it is (on its
reservation: reserved; preemptible: preemptible; else on demand), and a request naming a plan
it does not qualify for is a 400 with the field, through the API, the services and orders."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from neocloud.core.errors import ApplicationError
from scheduler import services as scheduler
from scheduler.models import Workload
from scheduler.specs import PricePlan, WorkloadSpec
from tenants.models import Role
from tests.builders import Builder, run
from tests.builders import commerce as commerce_builders
from tests.builders.commerce import Customer, Shop

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def shop() -> Shop:
    return commerce_builders.shop()


@pytest.fixture
def customer(build: Builder, shop: Shop) -> Customer:
    return commerce_builders.customer(build)


def _reservation(customer: Customer) -> str:
    now = timezone.now()
    reservation = run(
        scheduler.reservation_create,
        project=customer.project,
        gpu_model="h100",
        gpus=2,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=1),
    )
    return str(reservation.pk)


def _post(customer: Customer, **body: Any) -> Any:
    """A workload of one H100, or one instance of ``offering``."""
    shape = {} if "offering" in body else {"gpu_models": ["h100"]}
    return customer.client(Role.MEMBER).post(
        "/api/v1/workloads",
        {"project": str(customer.project.pk), "name": "w", **shape, **body},
        format="json",
    )


@pytest.mark.parametrize(
    ("body", "plan"),
    [
        pytest.param({}, "on_demand", id="on-demand"),
        pytest.param({"preemptible": True}, "preemptible", id="preemptible"),
        pytest.param({"priority_class": "low"}, "preemptible", id="preemptible-class"),
        pytest.param({"reservation": "?"}, "reserved", id="reserved"),
        pytest.param({"offering": "1xh100"}, "on_demand", id="offering"),
        pytest.param(
            {"offering": "1xh100", "priority_class": "low"}, "preemptible", id="offering-low"
        ),
        pytest.param({"price_plan": "preemptible", "preemptible": True}, "preemptible", id="named"),
    ],
)
def test_the_plan_follows_from_the_workload(
    customer: Customer, body: dict[str, Any], plan: str
) -> None:
    if body.get("reservation") == "?":
        body = {**body, "reservation": _reservation(customer)}

    response = _post(customer, **body)

    assert response.status_code == 201, response.json()
    assert response.json()["price_plan"] == plan
    assert Workload.objects.get().price_plan == plan


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            {"price_plan": "reserved"},
            "reserved is for work on a reservation; this workload is billed on_demand",
            id="reserved-without-reservation",
        ),
        pytest.param(
            {"price_plan": "preemptible"},
            "preemptible is for preemptible work; this workload is billed on_demand",
            id="preemptible-but-not",
        ),
        pytest.param(
            {"price_plan": "on_demand", "preemptible": True},
            "on_demand is for work that is not preemptible; this workload is billed preemptible",
            id="on-demand-but-preemptible",
        ),
    ],
)
def test_a_plan_the_workload_does_not_qualify_for_is_a_400(
    customer: Customer, body: dict[str, Any], message: str
) -> None:
    response = _post(customer, **body)

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["code"], error["fields"]) == ("invalid", {"price_plan": [message]})
    assert not Workload.objects.exists()


def test_on_its_reservation_work_is_reserved_and_nothing_else(customer: Customer) -> None:
    reservation = _reservation(customer)

    response = _post(customer, reservation=reservation, price_plan="on_demand")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "price_plan": ["on_demand is for work off a reservation; this workload is billed reserved"]
    }


def test_the_service_decides_the_plan_for_every_caller(customer: Customer) -> None:
    free_ride = WorkloadSpec("w", ("h100",), price_plan=PricePlan.RESERVED)

    with pytest.raises(ApplicationError) as refused:
        run(scheduler.workload_submit, project=customer.project, spec=free_ride)

    assert (refused.value.code, list(refused.value.fields)) == ("invalid", ["price_plan"])
    assert not Workload.objects.exists()


def test_an_order_bills_the_plan_its_work_is(customer: Customer) -> None:
    """The catalog sells reserved only for reserved capacity; a preemptible order runs
    preemptible work, checked again by the scheduler's service."""
    ordered = customer.post_order(offering="1xh100", price_plan="preemptible")
    free_ride = customer.post_order(offering="1xh100", price_plan="reserved")

    workload = Workload.objects.get(pk=ordered.json()["workload_id"])
    assert (workload.preemptible, workload.price_plan) == (True, "preemptible")
    assert free_ride.status_code == 400
    assert list(free_ride.json()["error"]["fields"]) == ["price_plan"]
