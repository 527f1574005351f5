"""A request body over the limit is refused (413) before anything reads or parses it, and
before its caller is checked; the node agent's requests have a limit of their own."""

from __future__ import annotations

import io
import json

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from pytest_django.fixtures import Settings

from neocloud.bodies import BodyLimitMiddleware
from scheduler.models import Workload
from tests.builders import Builder, client_with_key

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture
def small(settings: Settings) -> Settings:
    settings.REQUEST_BODY_MAX_BYTES = 1000
    settings.AGENT_REQUEST_BODY_MAX_BYTES = 5000
    return settings


def test_a_body_over_the_limit_is_413_before_the_caller_is_checked(small: object) -> None:
    body = json.dumps({"name": "x" * 2000})

    response = Client().post("/api/v1/workloads", body, content_type="application/json")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert response.json()["error"]["details"] == {"limit_bytes": 1000}


def test_a_keyed_body_over_the_limit_writes_nothing(build: Builder, small: object) -> None:
    owner = build.user()
    org = build.organization(owner=owner)
    _, secret = build.key(org, owner)
    client = client_with_key(secret)
    body = {"project": str(build.project(org).pk), "name": "big", "command": ["x" * 2000]}

    response = client.post("/api/v1/workloads", body, format="json")

    assert response.status_code == 413
    assert not Workload.objects.exists()


def test_the_agents_requests_have_their_own_limit(small: object) -> None:
    path = "/api/v1/nodes/7f3c9a2e-5b1d-4c6e-9a0f-1d2e3f4a5b6c/logs"
    body = json.dumps({"chunks": [], "pad": "x" * 3000})

    within = Client().post(path, body, content_type="application/json")
    beyond = Client().post(path, body + " " * 3000, content_type="application/json")

    assert within.status_code == 401  # read, then refused for its missing token
    assert beyond.status_code == 413


def test_a_console_form_over_the_limit_is_413(small: object) -> None:
    response = Client().post("/accounts/login/", {"username": "u", "password": "p" * 2000})

    assert response.status_code == 413


def _chunked(body: bytes) -> HttpRequest:
    request = RequestFactory().post("/api/v1/workloads", content_type="application/json")
    del request.META["CONTENT_LENGTH"]
    request.META["wsgi.input"] = io.BytesIO(body)
    request.META["wsgi.input_terminated"] = True  # what gunicorn says of a chunked body
    return request


def test_a_chunked_body_is_read_no_further_than_the_limit(small: object) -> None:
    seen: list[bytes] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(request.body)
        return HttpResponse("ok")

    middleware = BodyLimitMiddleware(view)
    refused = middleware(_chunked(b"x" * 1001))
    passed = middleware(_chunked(b'{"name": "small"}'))

    assert (refused.status_code, passed.status_code) == (413, 200)
    assert seen == [b'{"name": "small"}']
