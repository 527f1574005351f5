"""The OpenAPI schema holds: generated requests to every operation never get a 500, and every
response matches the schema (status, content type, body). 100 examples per operation.

The requests reach real objects: one world of every kind of object is made once for the
module (in a transaction rolled back at its end; each operation's test runs in a savepoint
of it, so one operation's writes do not leak into the next), and the generated path ids and
``organization``/``project`` references are mostly replaced by ids of that world, so detail
views, actions and creates do their work instead of answering 404.

Each operation is its own pytest case, driven by hypothesis directly (schemathesis's pytest
plugin does not run on pytest 9 yet).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.views import APIView
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from billing import services as billing
from billing.models import Invoice
from execution import longpoll
from metering import services as metering
from neocloud.wsgi import application
from scheduler import services as scheduler
from scheduler.specs import WorkloadSpec
from tenants import services as tenants
from tenants.models import Organization, Role, Scope, User
from tests.billing.conftest import History
from tests.builders import Builder, run
from tests.builders import commerce as commerce

EXAMPLES_PER_OPERATION = 100
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

OPENAPI = SchemaGenerator().get_schema(public=True)  # type: ignore[no-untyped-call]
SCHEMA = schemathesis.openapi.from_dict(json.loads(OpenApiJsonRenderer().render(OPENAPI)))
SCHEMA.app = application
# An invalid schema fails loudly here, at collection.
OPERATIONS = sorted(
    result.ok().label  # type: ignore[union-attr]
    for result in SCHEMA.get_all_operations()
)
REFERENCES = ("organization", "project")  # body and query fields that name a tenant's row


@dataclass
class World:
    """An operator owning an organization with one object of every kind, and the ids by the
    collection of their path (``workloads``, ``billing-accounts``…)."""

    operator: User
    organization: Organization
    ids: dict[str, list[str]]

    def ids_for(self, label: str) -> list[str]:
        collection = label.split(" ")[1].removeprefix("/api/v1/").split("/")[0]
        return self.ids.get(collection, [])


def _make_world() -> World:
    build = Builder()
    shop = commerce.shop()
    operator = build.user("ops@neocloud.example", is_staff=True)
    organization = build.organization("Acme", owner=operator)
    project = build.project(organization)
    other = commerce.customer(build, "Globex")
    member = build.member(organization, Role.MEMBER)
    spare_key, _ = build.key(organization, operator, scopes=[Scope.READ])
    invitation, _ = run(
        tenants.invitation_create,
        organization=organization,
        email="invitee@acme.example",
        role=Role.MEMBER,
    )
    quota = run(
        tenants.quota_set, organization=organization, project=project, gpu_model="h100", max_gpus=8
    )
    budget = run(metering.budget_set, organization=organization, gpu_hours=Decimal(100))
    order = commerce.order(project, "1xh100")
    workload = run(
        scheduler.workload_submit,
        project=project,
        spec=WorkloadSpec(name="llm", gpu_models=("h100",), runtime_estimate_s=600),
    )
    now = timezone.now()
    reservation = run(
        scheduler.reservation_create,
        project=project,
        gpu_model="h100",
        gpus=1,
        starts_at=now + timedelta(hours=1),
        ends_at=now + timedelta(hours=2),
    )
    january = datetime(2025, 1, 3, tzinfo=UTC)
    History(project=project, cluster_id=shop.cluster.pk).run(january, january + timedelta(hours=1))
    run(billing.period_close, period=billing.Period.parse("2025-01"))
    organizations = [str(organization.pk), str(other.organization.pk)]
    ids = {
        "organizations": organizations,
        "billing-accounts": organizations,
        "projects": [str(project.pk), str(other.project.pk)],
        "members": [str(member.pk)],
        "invitations": [str(invitation.pk)],
        "api-keys": [str(spare_key.pk)],
        "quotas": [str(quota.pk)],
        "budgets": [str(budget.pk)],
        "orders": [str(order.pk)],
        "workloads": [str(workload.pk)],
        "reservations": [str(reservation.pk)],
        "invoices": [str(i.pk) for i in Invoice.objects.filter(organization=organization)],
        "nodes": [str(node.pk) for node in shop.nodes],
        "clusters": [str(shop.cluster.pk)],
        "gpu-models": ["h100", "l4"],
        "regions": [shop.region.slug],
        "offerings": ["1xh100", "h100-training", "l4-half", "h100-reserved"],
    }
    return World(operator=operator, organization=organization, ids=ids)


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    with django_db_blocker.unblock(), transaction.atomic():
        yield _make_world()
        transaction.set_rollback(True)


@pytest.fixture
def wsgi_calls_keep_the_test_connection(db: None) -> Iterator[None]:
    # Calling the WSGI app directly fires request_finished, which would close the test's
    # connection (and its transaction); Django's test client disconnects it the same way.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(scope="module", autouse=True)
def _unthrottled() -> Iterator[None]:
    """Throttling has its own tests (test_throttling.py); here it is only a cost per request
    (two cache round trips), and a 429 would stand in for the answer being tested."""
    throttles = APIView.throttle_classes
    APIView.throttle_classes = []
    yield
    APIView.throttle_classes = throttles


@pytest.fixture(scope="module", autouse=True)
def _long_polls_answer_at_once() -> Iterator[None]:
    """Long polls (an agent's assignments, a workload's followed logs) have their own tests
    (tests/execution); here their waiting is only time, up to a minute an example."""
    serve = longpoll.serve

    async def at_once(view: Any, request: Any, **kwargs: Any) -> Any:
        return await longpoll.read(view, request, waited=True, **kwargs)

    longpoll.serve = at_once
    yield
    longpoll.serve = serve


@pytest.fixture
def operator_key(world: World, build: Builder) -> str:
    return build.key(world.organization, world.operator)[1]


def test_every_operation_is_exercised() -> None:
    assert "POST /api/v1/projects" in OPERATIONS
    assert len(OPERATIONS) >= 25


# What the fuzzing found once it reached real objects: responses that broke their schema.
FOUND: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "node-detail-steps-are-a-list": ("GET /api/v1/nodes/{id}", "nodes", None),
    "order-with-any-gpu-model-is-blank": ("GET /api/v1/orders/{id}", "orders", None),
    "audit-feed-is-paginated": ("GET /api/v1/organizations/{id}/events", "organizations", None),
    "replayed-invitation-has-no-token": (
        "POST /api/v1/invitations",
        "",
        {"email": "again@acme.example", "role": "member"},
    ),
}


@pytest.mark.usefixtures("wsgi_calls_keep_the_test_connection")
@pytest.mark.parametrize("found", list(FOUND), ids=list(FOUND))
def test_what_the_fuzzing_found_conforms(found: str, world: World, operator_key: str) -> None:
    label, collection, body = FOUND[found]
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None
    path_parameters = {"id": world.ids[collection][0]} if collection else None
    headers = {"Authorization": f"Bearer {operator_key}", "Idempotency-Key": "once"}
    case = (
        operation.Case(path_parameters=path_parameters)
        if body is None
        else operation.Case(body={**body, "organization": str(world.organization.pk)})
    )
    for _ in range(2):  # the second answer of a create is its replay
        response = case.call(headers=headers)
        assert response.status_code < 300
        case.validate_response(response, checks=CHECKS)


@pytest.mark.usefixtures("wsgi_calls_keep_the_test_connection")
@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_conforms_to_the_schema(label: str, world: World, operator_key: str) -> None:
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None
    headers = {"Authorization": f"Bearer {operator_key}"}
    real_ids = world.ids_for(label)
    references = {
        name: world.ids["organizations" if name == "organization" else "projects"]
        for name in REFERENCES
    }

    @given(case=operation.as_strategy(), data=st.data())
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def conforms(case: schemathesis.Case, data: st.DataObject) -> None:  # type: ignore[type-arg]
        for name, value in (case.path_parameters or {}).items():
            case.path_parameters[name] = data.draw(st.sampled_from([*real_ids, value]))
        for fields in (case.body, case.query):
            if isinstance(fields, dict):
                for name in set(REFERENCES) & set(fields):
                    fields[name] = data.draw(st.sampled_from([*references[name], fields[name]]))
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS)

    conforms()
