"""Issue 6 end to end through the API: an order becomes a workload on exact GPUs, runs,
succeeds, and closes the order; and the same against an offering directly. In process (as
the embedded default does) and on a real Celery worker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from scheduler import tasks
from tests.builders import Builder
from tests.builders.commerce import Customer, customer, shop
from tests.celery_worker import celery_worker, wait_until, worker_queue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _order_and_follow(buyer: Customer) -> tuple[dict[str, Any], dict[str, Any]]:
    response = buyer.post_order(
        key="order-1", offering="8xh100", price_plan="on_demand", runtime_estimate_s=1
    )
    assert response.status_code == 201, response.json()
    order = response.json()
    assert order["status"] == "fulfilled"
    workload = buyer.get(f"/api/v1/workloads/{order['workload_id']}").json()
    return order, workload


def test_order_to_running_to_succeeded_in_process(build: Builder, in_process: None) -> None:
    fleet = shop()
    buyer = customer(build)
    order, workload = _order_and_follow(buyer)
    assert workload["status"] == "running"
    (placement,) = workload["placement"]["placements"]
    assert placement["node"] in {n.name for n in fleet.nodes}
    assert sorted(placement["gpus"]) == list(range(8))
    time.sleep(1.1)
    tasks.tick()
    assert buyer.get(f"/api/v1/workloads/{workload['id']}").json()["status"] == "succeeded"
    assert buyer.get(f"/api/v1/orders/{order['id']}").json()["status"] == "closed"


def test_workload_submitted_against_an_offering(build: Builder, in_process: None) -> None:
    shop()
    buyer = customer(build)
    response = buyer.client("owner").post(
        "/api/v1/workloads",
        {
            "project": str(buyer.project.pk),
            "name": "notebook",
            "offering": "1xh100",
            "region": "eu-west",
            "runtime_estimate_s": 60,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = buyer.get(f"/api/v1/workloads/{response.json()['id']}").json()
    assert (body["offering"], body["gpus_per_node"], body["status"]) == ("1xh100", 1, "running")


def test_order_to_succeeded_on_a_worker(build: Builder, tmp_path: Path) -> None:
    shop()
    buyer = customer(build)
    with (
        worker_queue() as queue,
        celery_worker(
            queue=queue, log_dir=tmp_path, settings={"SIMULATED_STEP_DELAY_S": 0.01}
        ) as worker,
    ):
        order, workload = _order_and_follow(buyer)

        def closed() -> bool:
            return bool(buyer.get(f"/api/v1/orders/{order['id']}").json()["status"] == "closed")

        wait_until(closed, timeout=30, what=f"the order to close; log:\n{worker.log()}")
    final = buyer.get(f"/api/v1/workloads/{workload['id']}").json()
    assert final["status"] == "succeeded"
    types = [e["type"] for e in buyer.get(f"/api/v1/workloads/{workload['id']}/events").json()]
    assert types[0] == "scheduler.WorkloadSubmitted"
    assert types[-1] == "scheduler.AllocationReleased"
