"""The order endpoints: idempotent creation, tenant isolation, cancel, the approval wait, and
the audit trail. Orders here wait for approval (threshold 0), so nothing is fulfilled."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from events import store
from orders import events as ev
from orders import selectors, services
from orders.models import ApprovalPolicy, Order, OrderStatus
from tenants.models import Role
from tests.builders import Builder, run
from tests.builders.commerce import Customer
from tests.builders.commerce import customer as make_customer

pytestmark = pytest.mark.django_db

TRAINING: dict[str, Any] = {"offering": "h100-training", "price_plan": "on_demand", "quantity": 2}


@pytest.fixture(autouse=True)
def everything_waits_for_approval() -> None:
    run(services.approval_threshold_set, threshold_gpus=0)


def test_an_order_over_the_threshold_waits_validated(customer: Customer) -> None:
    response = customer.post_order(role=Role.MEMBER, runtime_estimate_s=5400, **TRAINING)

    body = response.json()
    assert response.status_code == 201
    assert body["status"] == OrderStatus.VALIDATED
    assert body["needs_approval"] is True
    assert body["status_reason"] == "16 GPUs is over the approval threshold of 0"
    assert (body["gpus"], body["gpus_per_node"], body["nodes"]) == (16, 8, 2)
    # 2.40 per GPU-hour x 16 GPUs x 1.5 h = 57.60
    assert (body["price_per_gpu_hour_minor"], body["currency"]) == (240, "USD")
    assert body["estimated_cost_minor"] == 5760
    assert [step["status"] for step in body["steps"]] == [
        OrderStatus.SUBMITTED,
        OrderStatus.VALIDATED,
    ]
    assert body["steps"][0]["actor"].startswith("api_key:")
    assert body["workload_id"] is None


def test_every_step_is_an_event_with_the_actor_and_organization(customer: Customer) -> None:
    order_id = customer.post_order(**TRAINING).json()["id"]

    cancelled = customer.post_order_action(order_id, "cancel", reason="changed my mind")

    events = store.read_stream(ev.ORDER_STREAM, order_id)
    assert [e.type for e in events] == [
        ev.OrderSubmitted.event_type,
        ev.OrderValidated.event_type,
        ev.OrderCancelled.event_type,
    ]
    assert {e.metadata["organization_id"] for e in events} == {str(customer.organization.pk)}
    assert all(e.metadata["actor"].startswith("api_key:") for e in events)
    assert cancelled.json()["status"] == OrderStatus.CANCELLED
    assert cancelled.json()["status_reason"] == "changed my mind"
    audit = customer.get(f"/api/v1/organizations/{customer.organization.pk}/events").json()
    assert ev.OrderCancelled.event_type in [e["type"] for e in audit["results"]]


def test_the_same_idempotency_key_twice_makes_one_order(customer: Customer) -> None:
    first = customer.post_order(key="order-1", **TRAINING)
    second = customer.post_order(key="order-1", **TRAINING)

    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_the_same_key_with_another_body_is_refused(customer: Customer) -> None:
    customer.post_order(key="order-1", **TRAINING)

    response = customer.post_order(key="order-1", **{**TRAINING, "quantity": 3})

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Order.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_simultaneous_posts_with_one_key_make_one_order(build: Builder) -> None:
    from tests.builders.commerce import shop

    shop()
    run(services.approval_threshold_set, threshold_gpus=0)
    buyer = make_customer(build)
    callers = 4
    barrier = threading.Barrier(callers)
    responses: list[tuple[int, dict[str, object]]] = []

    def post() -> None:
        barrier.wait()
        try:
            response = buyer.post_order(key="same-key", **TRAINING)
            responses.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [status for status, _ in responses] == [201] * callers
    assert all(body == responses[0][1] for _, body in responses)
    assert Order.objects.count() == 1
    assert len(store.read_stream(ev.ORDER_STREAM, str(Order.objects.get().pk))) == 2


def test_another_organizations_order_is_a_404(customer: Customer, build: Builder) -> None:
    order_id = customer.post_order(**TRAINING).json()["id"]
    stranger = make_customer(build, "Globex")

    detail = stranger.get(f"/api/v1/orders/{order_id}")
    cancel = stranger.post_order_action(order_id, "cancel")
    listed = stranger.get("/api/v1/orders").json()["results"]

    assert detail.status_code == cancel.status_code == 404
    assert listed == []
    assert Order.objects.get().status == OrderStatus.VALIDATED


@pytest.mark.parametrize(
    ("role", "status"),
    [
        pytest.param(Role.OWNER, 200, id="owner"),
        pytest.param(Role.MEMBER, 200, id="member"),
        pytest.param(Role.VIEWER, 200, id="viewer"),
        pytest.param(Role.BILLING, 200, id="billing"),
    ],
)
def test_who_reads_orders(customer: Customer, role: str, status: int) -> None:
    order_id = customer.post_order(**TRAINING).json()["id"]

    assert customer.get(f"/api/v1/orders/{order_id}", role=role).status_code == status


@pytest.mark.parametrize(
    ("role", "status"),
    [
        pytest.param(Role.MEMBER, 200, id="member"),
        pytest.param(Role.VIEWER, 403, id="viewer"),
    ],
)
def test_who_cancels_orders(customer: Customer, role: str, status: int) -> None:
    order_id = customer.post_order(**TRAINING).json()["id"]

    assert customer.post_order_action(order_id, "cancel", role=role).status_code == status


def test_orders_filter_by_status(customer: Customer) -> None:
    kept = customer.post_order(**TRAINING).json()["id"]
    cancelled = customer.post_order(**TRAINING).json()["id"]
    customer.post_order_action(cancelled, "cancel")

    listed = customer.get("/api/v1/orders?status=validated").json()["results"]

    assert [o["id"] for o in listed] == [kept]


def test_an_operator_rejects_a_waiting_order_in_the_admin(
    customer: Customer, operator: Client
) -> None:
    order_id = customer.post_order(**TRAINING).json()["id"]

    operator.post("/admin/orders/order/", {"action": "reject", "_selected_action": [order_id]})
    cancel = customer.post_order_action(order_id, "cancel")

    order = Order.objects.get(pk=order_id)
    assert order.status == OrderStatus.REJECTED
    assert order.status_reason.startswith("rejected_by_operator: rejected by operator")
    assert store.read_stream(ev.ORDER_STREAM, order_id)[-1].metadata["actor"].startswith("user:")
    assert cancel.status_code == 409
    assert cancel.json()["error"]["code"] == "invalid_transition"


def test_operators_set_the_approval_threshold_in_the_admin(operator: Client) -> None:
    response = operator.post("/admin/orders/approvalpolicy/1/change/", {"threshold_gpus": "128"})

    assert response.status_code == 302
    assert ApprovalPolicy.objects.get().threshold_gpus == 128
    assert selectors.approval_threshold() == 128
    assert [e.type for e in store.read_stream(ev.POLICY_STREAM, ev.APPROVAL_POLICY_ID)] == [
        ev.ApprovalThresholdSet.event_type,
        ev.ApprovalThresholdSet.event_type,
    ]


@pytest.mark.parametrize("page", ["order/", "approvalpolicy/", "approvalpolicy/1/change/"])
def test_admin_pages_render(customer: Customer, operator: Client, page: str) -> None:
    customer.post_order(**TRAINING)

    assert operator.get(f"/admin/orders/{page}?q=h100").status_code == 200
