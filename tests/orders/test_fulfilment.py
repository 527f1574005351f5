"""Approved orders become workloads or reservations through the scheduler's services, in the
approving transaction; the order records what it became and closes when that ends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from catalog import services as catalog
from catalog.models import Offering
from events import store
from events.models import Event
from events.replay import projections_replay
from neocloud.core.errors import ApplicationError
from orders import events as ev
from orders import services
from orders.models import ApprovalPolicy, Order, OrderStatus, OrderStep
from scheduler.models import Reservation, Workload
from scheduler.specs import PricePlan, RestartPolicy, WorkloadKind, WorkloadSpec
from tenants import services as tenants
from tenants.models import Role
from tests.builders import SYSTEM, run
from tests.builders.commerce import Customer, order

pytestmark = pytest.mark.django_db


def _steps(order_id: str) -> list[tuple[str, str]]:
    return list(OrderStep.objects.filter(order_id=order_id).values_list("status", "actor"))


def test_a_small_order_is_approved_and_fulfilled_at_once(customer: Customer) -> None:
    response = customer.post_order(
        role=Role.MEMBER,
        offering="h100-training",
        price_plan="on_demand",
        quantity=2,
        runtime_estimate_s=3600,
    )

    body = response.json()
    assert response.status_code == 201
    assert body["status"] == OrderStatus.FULFILLED
    workload = Workload.objects.get(pk=body["workload_id"])
    assert (workload.order_id, workload.offering, workload.price_plan) == (
        Order.objects.get().pk,
        "h100-training",
        "on_demand",
    )
    assert (workload.kind, workload.gpus_per_node, workload.nodes, workload.min_nodes) == (
        "job",
        8,
        2,
        None,
    )
    assert workload.project_id == customer.project.pk
    member_key = body["submitted_by"]
    assert [s for s, _ in _steps(body["id"])] == [
        OrderStatus.SUBMITTED,
        OrderStatus.VALIDATED,
        OrderStatus.APPROVED,
        OrderStatus.FULFILLED,
    ]
    assert _steps(body["id"])[2:] == [
        (OrderStatus.APPROVED, "system:orders.approval"),
        (OrderStatus.FULFILLED, "system:orders.approval"),
    ]
    assert member_key.startswith("api_key:")
    assert store.read_stream("workload", body["workload_id"])[0].metadata["actor"] == member_key


@pytest.mark.parametrize(
    ("offering", "plan", "expected"),
    [
        pytest.param(
            "8xh100",
            "preemptible",
            {"kind": "service", "preemptible": True, "gpus_per_node": 8, "gpu_milli": 1000},
            id="preemptible-instance",
        ),
        pytest.param(
            "l4-half",
            "on_demand",
            {"kind": "service", "preemptible": False, "gpus_per_node": 1, "gpu_milli": 500},
            id="half-an-l4",
        ),
    ],
)
def test_instances_and_inference_run_as_services(
    customer: Customer, offering: str, plan: str, expected: dict[str, object]
) -> None:
    body = customer.post_order(offering=offering, price_plan=plan).json()

    workload = Workload.objects.values(*expected).get(pk=body["workload_id"])
    assert workload == expected
    assert body["gpus"] == (8 if offering == "8xh100" else 1)


def test_reserved_capacity_becomes_a_reservation(customer: Customer) -> None:
    starts_at = timezone.now() + timedelta(days=1)
    ends_at = starts_at + timedelta(days=2)

    body = customer.post_order(
        offering="h100-reserved",
        price_plan="reserved",
        quantity=8,
        starts_at=starts_at.isoformat(),
        ends_at=ends_at.isoformat(),
    ).json()

    reservation = Reservation.objects.get(pk=body["reservation_id"])
    assert (reservation.gpu_model, reservation.gpus, reservation.order_id) == (
        "h100",
        8,
        Order.objects.get().pk,
    )
    assert (reservation.starts_at, reservation.ends_at) == (starts_at, ends_at)
    assert body["status"] == OrderStatus.FULFILLED
    assert body["workload_id"] is None
    # 1.80 per GPU-hour x 8 GPUs x 48 h = 691.20
    assert body["estimated_cost_minor"] == 69_120


def test_when_the_scheduler_refuses_nothing_is_written(customer: Customer) -> None:
    # Four 8-GPU nodes: the region has three H100 nodes.
    response = customer.post_order(offering="h100-training", price_plan="on_demand", quantity=4)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unschedulable"
    assert not Order.objects.exists()
    assert not Event.objects.filter(stream_type__in=["order", "workload"]).exists()


def test_an_operator_approves_a_large_order_in_the_admin(
    customer: Customer, operator: Client
) -> None:
    run(services.approval_threshold_set, threshold_gpus=8)
    order_id = customer.post_order(
        offering="h100-training", price_plan="on_demand", quantity=2
    ).json()["id"]
    assert Order.objects.get().status == OrderStatus.VALIDATED

    operator.post("/admin/orders/order/", {"action": "approve", "_selected_action": [order_id]})

    approved = Order.objects.get()
    assert approved.status == OrderStatus.FULFILLED
    assert Workload.objects.get(order_id=approved.pk).pk == approved.workload_id
    assert [s for s, _ in _steps(order_id)] == [
        OrderStatus.SUBMITTED,
        OrderStatus.VALIDATED,
        OrderStatus.APPROVED,
        OrderStatus.FULFILLED,
    ]
    assert _steps(order_id)[2][1].startswith("user:")
    assert approved.status_reason == ""


def test_approval_checks_the_order_again(customer: Customer, operator: Client) -> None:
    run(services.approval_threshold_set, threshold_gpus=8)
    order_id = customer.post_order(
        offering="h100-training", price_plan="on_demand", quantity=2
    ).json()["id"]
    run(tenants.quota_set, organization=customer.organization, gpu_model="h100", max_gpus=8)

    response = operator.post(
        "/admin/orders/order/",
        {"action": "approve", "_selected_action": [order_id]},
        follow=True,
    )

    shown = [str(m) for m in response.context["messages"]]
    assert any("quota_exceeded: the order needs 16 GPUs" in m for m in shown)
    assert Order.objects.get().status == OrderStatus.VALIDATED
    assert not Workload.objects.exists()


def test_a_fulfilled_order_cannot_be_cancelled(customer: Customer) -> None:
    order_id = customer.post_order(offering="1xh100", price_plan="on_demand").json()["id"]

    response = customer.post_order_action(order_id, "cancel")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_transition"
    assert response.json()["error"]["details"]["status"] == OrderStatus.FULFILLED


def test_an_order_closes_once_when_its_workload_ends(customer: Customer) -> None:
    fulfilled = order(customer.project, "1xh100")

    closed = run(services.order_close, order_id=fulfilled.pk, reason="workload succeeded")
    again = run(services.order_close, order_id=fulfilled.pk, reason="workload succeeded")

    assert closed.status == again.status == OrderStatus.CLOSED
    assert [e.type for e in store.read_stream(ev.ORDER_STREAM, str(fulfilled.pk))][-1] == (
        ev.OrderClosed.event_type
    )
    assert len(store.read_stream(ev.ORDER_STREAM, str(fulfilled.pk))) == 5


def test_only_fulfilled_orders_close(customer: Customer) -> None:
    run(services.approval_threshold_set, threshold_gpus=0)
    waiting = order(customer.project, "1xh100")

    with pytest.raises(ApplicationError) as refused:
        run(services.order_close, order_id=waiting.pk, reason="?")

    assert refused.value.code == "invalid_transition"


def test_a_workload_spec_straight_from_an_offering(shop: object) -> None:
    spec = services.workload_spec_for_offering(
        "h100-training",
        "eu-west",
        {
            "quantity": 3,
            "runtime_estimate_s": 600,
            "name": "bert",
            "price_plan": "on_demand",
            "cpu_milli": 4000,
            "priority_class": "high",
        },
    )

    assert spec == WorkloadSpec(
        name="bert",
        gpu_models=("h100",),
        kind=WorkloadKind.JOB,
        gpus_per_node=8,
        nodes=3,
        min_nodes=None,
        runtime_estimate_s=600,
        cpu_milli=4000,
        priority_class="high",
        max_runtime_s=7 * 86_400,
        restart_policy=RestartPolicy.NEVER,
        region="eu-west",
        price_plan=PricePlan.ON_DEMAND,
        offering="h100-training",
    )


@pytest.mark.parametrize(
    ("offering", "region", "params", "code"),
    [
        pytest.param("h100-training", None, {"quantity": 17}, "shape_not_allowed", id="shape"),
        pytest.param("h100-training", "us-east", {}, "region_not_offered", id="region"),
        pytest.param("h100-reserved", None, {}, "offering_unavailable", id="reserved"),
        pytest.param("1xh100", None, {"gpus_per_node": 2}, "invalid", id="shape-is-set"),
        pytest.param(
            "1xh100", None, {"price_plan": "reserved"}, "price_plan_not_offered", id="plan"
        ),
    ],
)
def test_a_workload_spec_is_checked_like_an_order(
    shop: object, offering: str, region: str | None, params: dict[str, object], code: str
) -> None:
    with pytest.raises(ApplicationError) as refused:
        services.workload_spec_for_offering(offering, region, params)

    assert refused.value.code == code


def _tables() -> dict[str, list[tuple[object, ...]]]:
    return {
        "offerings": sorted(Offering.objects.values_list()),
        "price_plans": sorted(
            Offering.objects.values_list("price_plans__id", "price_plans__price_per_gpu_hour_minor")
        ),
        "orders": sorted(Order.objects.values_list(), key=str),
        "steps": sorted(
            OrderStep.objects.values_list(
                "order_id", "position", "status", "actor", "reason", "at"
            ),
            key=str,
        ),
        "policy": list(ApprovalPolicy.objects.values_list()),
    }


def test_replay_rebuilds_the_catalog_and_orders_as_they_were(customer: Customer) -> None:
    order(customer.project, "1xh100")
    closed = order(customer.project, "l4-half")
    run(services.order_close, order_id=closed.pk, reason="done")
    run(services.approval_threshold_set, threshold_gpus=8)
    order(customer.project, "h100-training", quantity=2, runtime_estimate_s=60)
    rejected = order(customer.project, "h100-training", quantity=3)
    run(services.order_reject, order=rejected, reason="no")
    cancelled = order(customer.project, "h100-training", quantity=4)
    run(services.order_cancel, order=cancelled)
    run(catalog.offering_retire, offering=Offering.objects.get(slug="8xh100"))
    run(
        catalog.price_plan_set,
        offering=Offering.objects.get(slug="1xh100"),
        region="eu-west",
        plan="on_demand",
        price_per_gpu_hour_minor=260,
        currency="USD",
    )
    assert sorted(Order.objects.values_list("status", flat=True)) == [
        OrderStatus.CANCELLED,
        OrderStatus.CLOSED,
        OrderStatus.FULFILLED,
        OrderStatus.REJECTED,
        OrderStatus.VALIDATED,
    ]
    live = _tables()

    projections_replay(names=["catalog.catalog", "orders.orders"])

    assert _tables() == live


def test_operators_actor_is_recorded_when_they_order_for_a_customer(customer: Customer) -> None:
    placed = order(customer.project, "1xh100")

    assert placed.submitted_by == SYSTEM.label
