"""An order is checked before anything is written: the catalog, the organization, its quotas
and its payment standing. Each refusal has its stable code and names the field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from catalog import services as catalog
from catalog.models import Offering
from events.models import Event
from orders import events as ev
from orders.models import Order
from scheduler import hooks
from tenants import services as tenants
from tenants.models import Organization, Role
from tests.builders import run
from tests.builders.commerce import Customer

pytestmark = pytest.mark.django_db

SOON = timezone.now() + timedelta(days=1)


def _nothing_written() -> None:
    assert not Order.objects.exists()
    assert not Event.objects.filter(stream_type=ev.ORDER_STREAM).exists()


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        pytest.param({"offering": "9xh100"}, "offering_unavailable", "offering", id="unknown"),
        pytest.param(
            {"offering": "1xh100", "region": "us-east"},
            "region_not_offered",
            "region",
            id="region",
        ),
        pytest.param(
            {"offering": "h100-training", "price_plan": "preemptible"},
            "price_plan_not_offered",
            "price_plan",
            id="plan",
        ),
        pytest.param(
            {"offering": "1xh100", "gpu_model": "l4"},
            "gpu_model_not_offered",
            "gpu_model",
            id="model",
        ),
        pytest.param(
            {"offering": "1xh100", "quantity": 2},
            "shape_not_allowed",
            "quantity",
            id="two-instances",
        ),
        pytest.param(
            {"offering": "h100-training", "quantity": 17},
            "shape_not_allowed",
            "quantity",
            id="too-many-nodes",
        ),
        pytest.param(
            {"offering": "h100-training", "runtime_estimate_s": 8 * 86_400},
            "shape_not_allowed",
            "runtime_estimate_s",
            id="over-max-runtime",
        ),
        pytest.param(
            {"offering": "l4-half", "quantity": 2},
            "shape_not_allowed",
            "quantity",
            id="two-shares",
        ),
        pytest.param(
            {"offering": "1xh100", "starts_at": SOON.isoformat()},
            "shape_not_allowed",
            "starts_at",
            id="window-on-an-instance",
        ),
        pytest.param(
            {"offering": "h100-reserved", "price_plan": "reserved", "quantity": 4},
            "shape_not_allowed",
            "starts_at",
            id="reserved-without-window",
        ),
        pytest.param(
            {
                "offering": "h100-reserved",
                "price_plan": "reserved",
                "starts_at": (SOON - timedelta(days=3)).isoformat(),
                "ends_at": SOON.isoformat(),
            },
            "shape_not_allowed",
            "starts_at",
            id="reserved-in-the-past",
        ),
        pytest.param(
            {
                "offering": "h100-reserved",
                "price_plan": "reserved",
                "starts_at": SOON.isoformat(),
                "ends_at": (SOON + timedelta(days=31)).isoformat(),
            },
            "shape_not_allowed",
            "ends_at",
            id="reserved-too-long",
        ),
        pytest.param(
            {
                "offering": "h100-reserved",
                "price_plan": "reserved",
                "quantity": 17,
                "starts_at": SOON.isoformat(),
                "ends_at": (SOON + timedelta(days=1)).isoformat(),
            },
            "shape_not_allowed",
            "quantity",
            id="reserved-too-many",
        ),
        pytest.param(
            {"offering": "1xh100", "price_plan": "gold"},
            "invalid",
            "price_plan",
            id="unknown-plan-name",
        ),
    ],
)
def test_an_order_the_catalog_does_not_allow_is_refused(
    customer: Customer, body: dict[str, Any], code: str, field: str
) -> None:
    response = customer.post_order(**{"price_plan": "on_demand", **body})

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == code
    assert field in response.json()["error"]["fields"]
    _nothing_written()


def test_a_retired_offering_cannot_be_ordered(customer: Customer) -> None:
    run(catalog.offering_retire, offering=Offering.objects.get(slug="1xh100"))

    response = customer.post_order(offering="1xh100", price_plan="on_demand")

    assert response.json()["error"]["code"] == "offering_unavailable"
    _nothing_written()


def test_a_suspended_organization_orders_nothing(customer: Customer) -> None:
    run(tenants.organization_suspend, organization=customer.organization, reason="fraud")

    response = customer.post_order(offering="1xh100", price_plan="on_demand")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "organization_suspended"
    _nothing_written()


@pytest.mark.parametrize(
    ("org_quota", "project_quota", "message"),
    [
        pytest.param(8, None, "the order needs 16 GPUs; organization acme allows 8 h100", id="org"),
        pytest.param(
            32, 12, "the order needs 16 GPUs; project research allows 12 h100", id="project"
        ),
        pytest.param(
            12, 12, "the order needs 16 GPUs; project research allows 12 h100", id="both-equal"
        ),
    ],
)
def test_an_order_over_the_quota_is_refused_with_the_numbers(
    customer: Customer, org_quota: int, project_quota: int | None, message: str
) -> None:
    run(
        tenants.quota_set,
        organization=customer.organization,
        gpu_model="h100",
        max_gpus=org_quota,
    )
    if project_quota is not None:
        run(
            tenants.quota_set,
            organization=customer.organization,
            project=customer.project,
            gpu_model="h100",
            max_gpus=project_quota,
        )

    response = customer.post_order(offering="h100-training", price_plan="on_demand", quantity=2)

    error = response.json()["error"]
    assert response.status_code == 400
    assert error["code"] == "quota_exceeded"
    assert error["message"] == message
    assert error["fields"] == {"quantity": [message]}
    assert error["details"]["gpus"] == 16
    _nothing_written()


@pytest.fixture
def refuse_payment() -> Iterator[Callable[[Organization], str | None]]:
    def overdue(organization: Organization) -> str | None:
        return f"invoice of {organization.slug} is 30 days overdue"

    with hooks.payment_check.registered(overdue):
        yield overdue


@pytest.mark.usefixtures("refuse_payment")
def test_payment_standing_from_billings_hook_can_refuse(customer: Customer) -> None:
    response = customer.post_order(offering="1xh100", price_plan="on_demand")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "payment_required"
    assert response.json()["error"]["message"] == "invoice of acme is 30 days overdue"
    _nothing_written()


@pytest.mark.parametrize(
    ("role", "status", "code"),
    [
        pytest.param(Role.VIEWER, 403, "permission_denied", id="viewer"),
        # Billing sees no projects: the project is "does not exist", as for a stranger.
        pytest.param(Role.BILLING, 400, "invalid", id="billing"),
    ],
)
def test_viewers_and_billing_cannot_order(
    customer: Customer, role: str, status: int, code: str
) -> None:
    response = customer.post_order(role=role, offering="1xh100", price_plan="on_demand")

    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    _nothing_written()


def test_ordering_needs_a_write_key_and_authentication(customer: Customer, build: Any) -> None:
    owner = customer.organization.membership_set.get(role=Role.OWNER).user
    read_key = build.key(customer.organization, owner, scopes=["read"])[1]
    customer.keys["read_key"] = read_key
    customer.keys["anonymous"] = ""

    read_only = customer.post_order(role="read_key", offering="1xh100", price_plan="on_demand")
    anonymous = customer.post_order(role="anonymous", offering="1xh100", price_plan="on_demand")

    assert (read_only.status_code, anonymous.status_code) == (403, 401)
    _nothing_written()


def test_another_organizations_project_does_not_exist(customer: Customer, build: Any) -> None:
    other = build.organization("Globex")
    stranger = build.project(other, "Secret")

    response = customer.post_order(
        offering="1xh100", price_plan="on_demand", project=str(stranger.pk)
    )

    assert response.status_code == 400
    assert "project" in response.json()["error"]["fields"]
    _nothing_written()
