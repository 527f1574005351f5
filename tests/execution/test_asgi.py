"""The ASGI application as production serves it (``neocloud.asgi``), driven in this process:
bodies are bounded before any view runs, and the long polls' own handler keeps what Django's
middlewares give every request."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.test import Client

from neocloud.core.correlation import HEADER
from scheduler.models import Workload
from tenants.models import Membership
from tests.execution.conftest import Agent, Customer, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture(scope="module")
def application() -> Any:
    saved = dict(os.environ)  # importing it sets DATABASE_CONN_MAX_AGE for its process
    from neocloud.asgi import application

    os.environ.clear()
    os.environ.update(saved)
    return application


def _request(application: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def sent() -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(sent())


def _key(customer: Customer) -> dict[str, str]:
    return {"Authorization": str(customer.client._credentials["HTTP_AUTHORIZATION"])}  # type: ignore[attr-defined]


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_an_oversized_body_is_refused_before_the_view_runs(
    application: Any, acme: Customer, declared: bool
) -> None:
    # Given a body one byte past the limit, with a valid key, to the submit endpoint,
    body = b"{" + b" " * settings.REQUEST_BODY_MAX_BYTES + b"}"

    async def streamed() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    content: Any = body if declared else streamed()
    headers = {**_key(acme), "Content-Type": "application/json"}
    # when it is sent (declared up front, or streamed without a length),
    answer = _request(application, "POST", "/api/v1/workloads", content=content, headers=headers)
    # then it is answered 413 body_too_large, and nothing was submitted.
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"
    assert answer.json()["error"]["details"]["limit_bytes"] == settings.REQUEST_BODY_MAX_BYTES
    assert not Workload.objects.exists()


def test_a_long_poll_keeps_the_middlewares_answers(
    application: Any, agents: list[Agent], acme: Customer
) -> None:
    workload = submit(acme)
    logs = f"/api/v1/workloads/{workload.pk}/logs"
    # Given the long polls' own handler, when a follow comes without a key, for a workload
    # that is not there, and with a key,
    anonymous = _request(application, "GET", logs, params={"follow": "true"})
    missing = _request(application, "GET", "/api/v1/nodes/nope/assignments")
    answered = _request(application, "GET", logs, params={"cursor": 0}, headers=_key(acme))
    # then each is answered in the API's shape, with the request's id and the security headers.
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "not_authenticated"
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "not_authenticated"
    assert answered.status_code == 200, answered.text
    assert answered.json()["entries"] == []
    for answer in (anonymous, missing, answered):
        assert answer.headers[HEADER]
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_a_long_poll_reads_the_session_of_a_signed_in_member(
    application: Any, agents: list[Agent], acme: Customer
) -> None:
    # Given a member of the organization signed in to the console (a session, no key),
    workload = submit(acme)
    member = Membership.objects.get(organization=acme.organization).user
    browser = Client()
    browser.force_login(member)
    session = browser.cookies[settings.SESSION_COOKIE_NAME].value
    cookie = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session}"}
    logs = f"/api/v1/workloads/{workload.pk}/logs"
    # when the console reads the workload's output through the long polls' handler,
    answer = _request(application, "GET", logs, params={"cursor": 0}, headers=cookie)
    # then the session authenticates it, as on every other route.
    assert answer.status_code == 200, answer.text
    assert answer.json()["entries"] == []
