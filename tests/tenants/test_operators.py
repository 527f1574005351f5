"""Operators' actions check the key's scope like every other action: the permission table
says who may (operators) and with which scope (admin). A read or write key of an operator
changes nothing that needs an admin key; a customer's admin key changes none of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from billing import services as billing
from catalog import services as catalog
from catalog.models import Offering
from events.models import Event
from inventory import services as inventory
from inventory.lifecycle import NodeAction, NodeState
from inventory.models import Node
from neocloud.core.transactions import atomic_with_retry
from orders import services as orders
from scheduler import services as scheduler
from tenants import services as tenants
from tenants.access import Actor
from tenants.errors import PermissionDenied
from tenants.models import ApiKey, Organization, Project, Role, Scope, User
from tests.builders import Builder, run
from tests.builders import commerce as commerce_builders

pytestmark = pytest.mark.django_db

READ: list[str] = [Scope.READ]
WRITE: list[str] = [Scope.READ, Scope.WRITE]
ADMIN: list[str] = [Scope.READ, Scope.WRITE, Scope.ADMIN]


@dataclass
class World:
    shop: commerce_builders.Shop
    customer: commerce_builders.Customer
    registered: Node
    user: User

    @property
    def organization(self) -> Organization:
        return self.customer.organization

    @property
    def project(self) -> Project:
        return self.customer.project


@pytest.fixture
def world(build: Builder) -> World:
    shop = commerce_builders.shop()
    h100 = shop.nodes[0].gpu_model
    assert h100 is not None
    registered = commerce_builders.node(shop.cluster, "h100-new", h100, state=NodeState.REGISTERED)
    return World(
        shop=shop,
        customer=commerce_builders.customer(build),
        registered=registered,
        user=build.user("someone@example.com"),
    )


def waiting_order(world: World) -> Any:
    run(orders.approval_threshold_set, threshold_gpus=0)
    return commerce_builders.order(world.project, "1xh100")


OPERATOR_ACTIONS: dict[str, Callable[[World, Actor], Any]] = {
    "define an offering": lambda w, a: catalog.offering_define(
        actor=a, slug="2xh100", name="2xH100", kind="instance", gpu_models=["h100"]
    ),
    "retire an offering": lambda w, a: catalog.offering_retire(
        actor=a, offering=Offering.objects.get(slug="8xh100")
    ),
    "set a price": lambda w, a: catalog.price_plan_set(
        actor=a,
        offering=Offering.objects.get(slug="8xh100"),
        region=commerce_builders.REGION,
        plan="on_demand",
        price_per_gpu_hour_minor=1,
        currency="USD",
    ),
    "define a region": lambda w, a: inventory.region_define(actor=a, slug="us-east", name="US"),
    "provision a node": lambda w, a: inventory.node_provision(actor=a, node=w.registered),
    "cordon a node": lambda w, a: inventory.node_transition(
        actor=a, node=w.shop.nodes[0], action=NodeAction.CORDON
    ),
    "rotate a node token": lambda w, a: inventory.node_token_rotate(actor=a, node=w.shop.nodes[0]),
    "define a priority class": lambda w, a: scheduler.priority_class_define(
        actor=a, name="urgent", value=500
    ),
    "configure a queue": lambda w, a: scheduler.queue_configure(
        actor=a, project=w.project, weight=2.0
    ),
    "set the approval threshold": lambda w, a: orders.approval_threshold_set(
        actor=a, threshold_gpus=3
    ),
    "reject an order": lambda w, a: orders.order_reject(
        actor=a, order=waiting_order(w), reason="no"
    ),
    "set a billing profile": lambda w, a: billing.account_profile_set(
        actor=a, organization=w.organization, billing_country="DE", currency="EUR"
    ),
    "grant credit": lambda w, a: billing.credit_grant(
        actor=a, organization=w.organization, kind="promotional", amount_minor=100, currency="USD"
    ),
    "change a user": lambda w, a: tenants.user_update(
        actor=a, user=w.user, full_name="Renamed", is_staff=False, is_active=True
    ),
    "create an organization": lambda w, a: tenants.organization_create(
        actor=a, name="Initech", owner=w.user
    ),
    "suspend an organization": lambda w, a: tenants.organization_suspend(
        actor=a, organization=w.organization, reason="unpaid"
    ),
    "set a quota": lambda w, a: tenants.quota_set(
        actor=a, organization=w.organization, gpu_model="h100", max_gpus=8
    ),
}


def operator_key(build: Builder, scopes: list[str]) -> ApiKey:
    operator = build.user(is_staff=True)
    api_key, _ = build.key(build.organization("Operators", owner=operator), operator, scopes)
    return api_key


def customer_admin_key(build: Builder, world: World) -> ApiKey:
    admin = build.member(world.organization, Role.ADMIN)
    api_key, _ = build.key(world.organization, admin.user, ADMIN)
    return api_key


@pytest.mark.parametrize("action", OPERATOR_ACTIONS)
@pytest.mark.parametrize(
    "caller", ["operator read key", "operator write key", "customer admin key"]
)
def test_an_operator_action_needs_an_operator_with_an_admin_key(
    build: Builder, world: World, action: str, caller: str
) -> None:
    api_key = {
        "operator read key": lambda: operator_key(build, READ),
        "operator write key": lambda: operator_key(build, WRITE),
        "customer admin key": lambda: customer_admin_key(build, world),
    }[caller]()
    before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        atomic_with_retry(
            OPERATOR_ACTIONS[action], world, Actor(user=api_key.user, api_key=api_key)
        )

    assert Event.objects.count() == before


@pytest.mark.parametrize("action", OPERATOR_ACTIONS)
def test_an_operators_admin_key_may(build: Builder, world: World, action: str) -> None:
    api_key = operator_key(build, ADMIN)
    before = Event.objects.last()

    atomic_with_retry(OPERATOR_ACTIONS[action], world, Actor(user=api_key.user, api_key=api_key))

    recorded = Event.objects.filter(position__gt=before.position if before else 0)
    assert recorded.exists()
    assert recorded.last().metadata["actor"] == f"api_key:{api_key.prefix}"  # type: ignore[union-attr]
