"""A dev environment in the catalog (issue 32): an offering of kind dev (image and defaults)
ordered becomes a workload of kind dev, which takes SSH and an idle stop; one node, one at a
time."""

from __future__ import annotations

import pytest

from scheduler.models import Workload
from tests.builders.commerce import Customer, offering, price

pytestmark = pytest.mark.django_db


@pytest.fixture
def dev_offering(customer: Customer) -> None:
    made = offering("h100-dev", "dev", gpus_per_node=1, image="ghcr.io/example/dev:1")
    price(made, "on_demand", 260)


def test_a_dev_offering_ordered_runs_a_dev_environment(
    customer: Customer, dev_offering: None, settings: object
) -> None:
    body = customer.post_order(offering="h100-dev", price_plan="on_demand").json()

    workload = Workload.objects.get(pk=body["workload_id"])
    assert (workload.kind, workload.ssh, workload.image) == ("dev", True, "ghcr.io/example/dev:1")
    assert workload.idle_stop_s == settings.DEV_IDLE_STOP_S  # type: ignore[attr-defined]
    assert workload.command == []  # the image's own entrypoint


def test_a_dev_offering_is_one_at_a_time(customer: Customer, dev_offering: None) -> None:
    response = customer.post_order(offering="h100-dev", price_plan="on_demand", quantity=2)

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["quantity"]
    assert not Workload.objects.exists()
