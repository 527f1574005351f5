"""No credential in any log line: when a request that holds one fails (its database
connection dropped, a step raising), the logged traceback names where it failed, not the
values its frames held. Each failure is injected at one spot of a real request. A token in a
link's path (a password reset's, an invitation's) is logged as ``[redacted]``."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core import mail
from django.db import OperationalError, connection
from django.test import Client
from pytest_django.fixtures import Settings

from execution import selectors as execution
from tenants import services as tenancy
from tenants.models import Role, Secret
from tests.builders import Builder, client_with_key, run
from tests.execution.conftest import agents_of, customer_of, secret, submit
from tests.logs import captured_log
from tests.scheduler.conftest import in_process, ready_fleet

__all__ = ["in_process"]

pytestmark = [pytest.mark.postgres]

SECRET_VALUE = "hf_Quartz-Zebra-0451-secret-value"
PASSWORD = "correct-Horse-Battery-9f3e1a"
DROPPED = "server closed the connection unexpectedly"


@pytest.fixture(params=["json", "console"])
def log_text(request: pytest.FixtureRequest) -> Iterator[io.StringIO]:
    """What the stdout handler writes in production (``json``) and in the demo (``console``)."""
    with captured_log(request.param) as buffer:
        yield buffer


@contextmanager
def database_fails_on(fragment: str) -> Iterator[None]:
    """Every query whose SQL holds ``fragment`` fails as a dropped connection does."""

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        if fragment in sql:
            raise OperationalError(DROPPED)
        return execute(sql, *args)

    with connection.execute_wrapper(wrapper):
        yield


def assert_logged_without(text: str, *credentials: str) -> None:
    assert "OperationalError" in text or "RuntimeError" in text  # the failure was logged
    assert [c for c in credentials if c in text] == []


@pytest.mark.django_db
def test_an_api_key_is_not_logged_when_its_lookup_fails(
    build: Builder, log_text: io.StringIO
) -> None:
    owner = build.user()
    _, key = build.key(build.organization("Acme", owner=owner), owner)

    with database_fails_on('FROM "tenants_apikey"'):
        response = client_with_key(key).get("/api/v1/secrets")

    assert response.status_code == 500
    assert_logged_without(log_text.getvalue(), key)


@pytest.mark.django_db
def test_a_node_token_is_not_logged_when_its_node_lookup_fails(
    settings: Settings, in_process: None, log_text: io.StringIO
) -> None:
    settings.PROVISIONING_DRIVER = "agent"
    (agent, _) = agents_of(ready_fleet(nodes=2, gpus=8))

    # The reports' endpoint: it runs on the request's connection (a long poll reads on
    # threads of its own, which this test's injected failure does not reach).
    with database_fails_on('FROM "inventory_node"'):
        response = agent.client.post(agent.url("reports"), {"reports": []}, format="json")

    assert response.status_code == 500
    assert_logged_without(log_text.getvalue(), agent.token)


@pytest.mark.django_db(transaction=True)
def test_secret_values_are_not_logged_when_the_assignments_listing_fails(
    build: Builder,
    settings: Settings,
    in_process: None,
    monkeypatch: pytest.MonkeyPatch,
    log_text: io.StringIO,
) -> None:
    settings.PROVISIONING_DRIVER = "agent"
    agents = agents_of(ready_fleet(nodes=2, gpus=8))
    acme = customer_of(build, "Acme")
    secret(acme, "HF_TOKEN", SECRET_VALUE)
    submit(acme, secrets=("HF_TOKEN",))
    (agent,) = [a for a in agents if a.assignments()["assignments"]]

    def fails() -> float:
        raise RuntimeError("the listing could not be rendered")

    # Raised while each listed assignment, its environment and its secret, is made an answer.
    monkeypatch.setattr(execution, "stop_grace_s", fails)
    response = agent.client.get(agent.url("assignments"))

    assert response.status_code == 500
    assert_logged_without(log_text.getvalue(), SECRET_VALUE, agent.token)


@pytest.mark.django_db
def test_a_secrets_value_is_not_logged_when_its_write_fails(
    build: Builder, log_text: io.StringIO
) -> None:
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    project = build.project(organization)
    _, key = build.key(organization, owner)
    client = client_with_key(key)

    with database_fails_on('INSERT INTO "tenants_secret"'):
        created = client.post(
            "/api/v1/secrets",
            {"project": str(project.pk), "name": "HF_TOKEN", "value": SECRET_VALUE},
            format="json",
        )
    kept = run(tenancy.secret_create, project=project, name="WANDB_KEY", value="first")
    with database_fails_on('UPDATE "tenants_secret"'):
        updated = client.patch(
            f"/api/v1/secrets/{kept.pk}", {"value": SECRET_VALUE + "-2"}, format="json"
        )

    assert (created.status_code, updated.status_code) == (500, 500)
    assert list(Secret.objects.values_list("name", flat=True)) == ["WANDB_KEY"]
    assert_logged_without(log_text.getvalue(), SECRET_VALUE, key)


@pytest.mark.django_db
def test_a_password_is_not_logged_when_signing_in_fails(
    build: Builder, log_text: io.StringIO
) -> None:
    user = build.user("owner@acme.test")
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    client = Client(raise_request_exception=False)

    with database_fails_on('FROM "tenants_user"'):
        response = client.post("/login", {"username": user.email, "password": PASSWORD})

    assert response.status_code == 500
    assert_logged_without(log_text.getvalue(), PASSWORD)


@pytest.mark.django_db
def test_a_password_reset_links_token_is_not_logged(build: Builder, log_text: io.StringIO) -> None:
    user = build.user("owner@acme.test")
    client = Client()
    client.post("/password-reset", {"email": user.email})
    (message,) = mail.outbox
    link = re.search(r"https?://[^/]+(/password-reset/([^/\s]+)/(\S+))", str(message.body))
    assert link is not None
    path, uid, token = link.groups()

    opened = client.get(path)

    assert opened.status_code == 302  # on to the form, the token kept in the session
    assert f"/password-reset/{uid}/[redacted]" in log_text.getvalue()
    assert token not in log_text.getvalue()


@pytest.mark.django_db
def test_an_invitation_links_token_is_not_logged(build: Builder, log_text: io.StringIO) -> None:
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    _, token = run(
        tenancy.invitation_create,
        organization=organization,
        email="new@acme.test",
        role=Role.MEMBER,
    )
    client = Client()
    client.force_login(build.user("someone-else@acme.test"))

    refused = client.get(f"/invitations/{token}")

    assert refused.status_code == 403  # Django logs it ("Forbidden: <path>") with the request
    lines = log_text.getvalue()
    assert "/invitations/[redacted]" in lines
    assert token not in lines


@pytest.mark.django_db
def test_joining_through_an_invitation_logs_and_keeps_no_token(
    build: Builder, log_text: io.StringIO
) -> None:
    """Joining signs the new user in at the invitation's address: the sign-in's record
    (django-axes' log line and its access log) names the path with the token redacted."""
    from axes.models import AccessLog

    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    _, token = run(
        tenancy.invitation_create,
        organization=organization,
        email="new@acme.test",
        role=Role.MEMBER,
    )
    fields = {"full_name": "Nia Newcomer", "password": PASSWORD, "password_again": PASSWORD}

    joined = Client().post(f"/invitations/{token}", fields)

    assert joined.status_code == 302  # signed in, on to the overview
    assert token not in log_text.getvalue()
    paths = list(AccessLog.objects.values_list("path_info", flat=True))
    assert paths == ["/invitations/[redacted]"]
