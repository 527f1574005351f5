"""What an order's workload runs: given with the order, held to the workload's bounds before
anything is written (also when the order waits for approval), recorded on the order, and old
orders without a program still replaying."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from events.models import Event
from orders import events as ev
from orders import services
from orders.models import Order, OrderStatus
from scheduler.models import Workload
from scheduler.specs import PROGRAM_FIELDS
from tenants import services as tenancy
from tests.builders import SYSTEM, run
from tests.builders.commerce import Customer

pytestmark = pytest.mark.django_db

PROGRAM: dict[str, Any] = {
    "command": ["python", "-m", "serve"],
    "image": "ghcr.io/acme/serve:1.2",
    "env": {"MODE": "prod"},
    "secrets": ["HF_TOKEN"],
    "working_dir": "/srv/app",
    "ports": [8000],
}


def _nothing_written() -> None:
    assert not Order.objects.exists()
    assert not Event.objects.filter(stream_type=ev.ORDER_STREAM).exists()


def test_an_orders_workload_runs_what_the_order_says(customer: Customer) -> None:
    run(tenancy.secret_create, project=customer.project, name="HF_TOKEN", value="hf_x")

    response = customer.post_order(offering="1xh100", price_plan="on_demand", **PROGRAM)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == OrderStatus.FULFILLED
    assert {name: body[name] for name in PROGRAM_FIELDS} == PROGRAM
    workload = Workload.objects.get(pk=body["workload_id"])
    assert {name: getattr(workload, name) for name in PROGRAM_FIELDS} == PROGRAM


def test_an_approved_order_runs_what_it_recorded(customer: Customer) -> None:
    run(services.approval_threshold_set, threshold_gpus=0)
    response = customer.post_order(
        offering="h100-training", price_plan="on_demand", command=["train", "--epochs", "3"]
    )
    assert response.json()["status"] == OrderStatus.VALIDATED

    order = run(services.order_approve, order=Order.objects.get(pk=response.json()["id"]))

    workload = Workload.objects.get(pk=order.workload_id)
    assert (workload.command, workload.image, workload.working_dir) == (
        ["train", "--epochs", "3"],
        "",
        "",
    )


@pytest.mark.parametrize(
    ("offering", "body", "field"),
    [
        pytest.param("1xh100", {"command": ["py", "a\0b"]}, "command", id="nul-in-argv"),
        pytest.param("1xh100", {"image": "Not An Image"}, "image", id="image"),
        pytest.param("1xh100", {"env": {"1X": "v"}}, "env", id="env-name"),
        pytest.param("1xh100", {"secrets": ["NOPE"]}, "secrets", id="unknown-secret"),
        pytest.param("1xh100", {"working_dir": "srv"}, "working_dir", id="relative-dir"),
        pytest.param("1xh100", {"ports": [0]}, "ports", id="port-range"),
        pytest.param("h100-training", {"ports": [8000]}, "ports", id="ports-of-a-job"),
    ],
)
@pytest.mark.parametrize("waits", [False, True], ids=["fulfilled-at-once", "waits-for-approval"])
def test_a_bad_program_is_a_400_naming_the_field_and_writes_nothing(
    customer: Customer, offering: str, body: dict[str, Any], field: str, waits: bool
) -> None:
    if waits:
        run(services.approval_threshold_set, threshold_gpus=0)

    response = customer.post_order(offering=offering, price_plan="on_demand", **body)

    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    _nothing_written()


def test_an_order_recorded_before_orders_carried_a_program_still_replays(
    customer: Customer,
) -> None:
    ordered = run(
        services.order_submit,
        actor=SYSTEM,
        project=customer.project,
        offering="1xh100",
        region="eu-west",
        price_plan="on_demand",
        request=services.OrderRequest(command=["serve"]),
    )
    recorded = Event.objects.get(stream_id=str(ordered.pk), type=ev.OrderSubmitted.event_type)
    old_id = uuid.uuid4()
    old = {k: v for k, v in recorded.data.items() if k not in PROGRAM_FIELDS}
    old["order_id"] = str(old_id)
    with connection.cursor() as cursor:  # as it was written before orders ran anything
        cursor.execute(
            "INSERT INTO events_event (stream_type, stream_id, version, type, schema_version,"
            " data, metadata, recorded_at) VALUES ('order', %s, 1, %s, 1, %s, %s, %s)",
            [
                str(old_id),
                ev.OrderSubmitted.event_type,
                json.dumps(old),
                json.dumps(recorded.metadata),
                connection.ops.adapt_datetimefield_value(recorded.recorded_at),
            ],
        )

    call_command("replay", "orders.orders", verbosity=0)

    row = Order.objects.get(pk=old_id)
    assert (row.command, row.image, row.env, row.secrets, row.working_dir, row.ports) == (
        [],
        "",
        {},
        [],
        "",
        [],
    )
    assert Order.objects.get(pk=ordered.pk).command == ["serve"]
