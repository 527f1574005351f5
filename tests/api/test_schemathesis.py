"""The OpenAPI schema holds: generated requests to every operation never get a 500, and every
response matches the schema (status, content type, body). Bounded examples per operation.

Each operation is its own pytest case, driven by hypothesis directly (schemathesis's pytest
plugin does not run on pytest 9 yet).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from neocloud.wsgi import application
from tests.builders import Builder

EXAMPLES_PER_OPERATION = 15
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


@pytest.fixture
def wsgi_calls_keep_the_test_connection(db: None) -> Iterator[None]:
    # Calling the WSGI app directly fires request_finished, which would close the test's
    # connection (and its transaction); Django's test client disconnects it the same way.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def operator_key(build: Builder) -> str:
    """An operator who also owns an organization with a project: every operation can work."""
    operator = build.user("ops@neocloud.example", is_staff=True)
    organization = build.organization("Acme", owner=operator)
    build.project(organization)
    return build.key(organization, operator)[1]


def test_every_operation_is_exercised() -> None:
    assert "POST /api/v1/projects" in OPERATIONS
    assert len(OPERATIONS) >= 25


@pytest.mark.usefixtures("wsgi_calls_keep_the_test_connection")
@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_conforms_to_the_schema(label: str, operator_key: str) -> None:
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None
    headers = {"Authorization": f"Bearer {operator_key}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def conforms(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS)

    conforms()
