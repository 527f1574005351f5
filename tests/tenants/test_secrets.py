"""Project secrets: admins and owners write them, nobody reads a value back; the value is
sealed in its table and in no event, stored idempotent reply or log line."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from neocloud.models import IdempotencyRecord
from tenants import selectors
from tenants.models import Organization, Project, Role, Secret
from tests.builders import Builder, client_with_key

VALUE = "s3cr3t-Zebra-Quartz-0xC0FFEE-only-here"


@dataclass
class Tenant:
    organization: Organization
    project: Project
    admin_key: str


def tenant(build: Builder, name: str) -> Tenant:
    owner = build.user()
    organization = build.organization(name, owner=owner)
    project = build.project(organization)
    admin = build.member(organization, Role.ADMIN)
    return Tenant(organization, project, build.key(organization, admin.user)[1])


@pytest.fixture
def acme(build: Builder) -> Tenant:
    return tenant(build, "Acme")


def create(t: Tenant, name: str = "HF_TOKEN", value: str = VALUE, **headers: Any) -> dict[str, Any]:
    response = client_with_key(t.admin_key).post(
        "/api/v1/secrets",
        {"project": str(t.project.pk), "name": name, "value": value},
        format="json",
        **headers,
    )
    assert response.status_code == 201, response.content
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.django_db
def test_a_value_is_in_no_event_reply_or_log(
    acme: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        body = create(acme, HTTP_IDEMPOTENCY_KEY="create-1")
        replayed = client_with_key(acme.admin_key).post(
            "/api/v1/secrets",
            {"project": str(acme.project.pk), "name": "HF_TOKEN", "value": VALUE},
            format="json",
            HTTP_IDEMPOTENCY_KEY="create-1",
        )
        updated = client_with_key(acme.admin_key).patch(
            f"/api/v1/secrets/{body['id']}", {"value": VALUE + "-2"}, format="json"
        )
        shown = client_with_key(acme.admin_key).get("/api/v1/secrets")

    assert set(body) == {"id", "organization", "project", "name", "created_at", "updated_at"}
    assert replayed.json() == body
    for response in (replayed, updated, shown):
        assert VALUE not in response.content.decode()
    with connection.cursor() as cursor:
        cursor.execute("SELECT e::text FROM events_event e")
        events = [row[0] for row in cursor.fetchall()]
    assert any("tenants.SecretSet" in row for row in events)
    assert not any(VALUE in row for row in events)
    stored = [str(vars(record)) for record in IdempotencyRecord.objects.all()]
    assert stored
    assert not any(VALUE in row for row in stored)
    assert VALUE not in caplog.text
    # Nor a plain hash of it: the request's fingerprint is keyed, so it cannot be guessed at.
    sent = {"name": "HF_TOKEN", "project": str(acme.project.pk), "value": VALUE}
    plain = hashlib.sha256(
        f"POST /api/v1/secrets\n{json.dumps(sent, sort_keys=True)}".encode()
    ).hexdigest()
    assert plain not in {record.fingerprint for record in IdempotencyRecord.objects.all()}


@pytest.mark.django_db
def test_the_value_is_sealed_in_its_table_and_opens_through_the_selector(acme: Tenant) -> None:
    create(acme)
    create(acme, "OTHER", "x")

    with connection.cursor() as cursor:
        cursor.execute("SELECT t::text FROM tenants_secret t")
        rows = [row[0] for row in cursor.fetchall()]

    assert len(rows) == 2
    assert not any(VALUE in row for row in rows)
    assert selectors.secret_values(acme.project, ["HF_TOKEN", "MISSING"]) == {"HF_TOKEN": VALUE}


@pytest.mark.django_db
def test_rotation_seals_again_with_the_first_key(acme: Tenant, settings) -> None:  # type: ignore[no-untyped-def]
    create(acme)
    old = Secret.objects.get().sealed
    new_key = Fernet.generate_key().decode()
    settings.SECRETS_KEYS = [new_key, *settings.SECRETS_KEYS]

    call_command("rotate_secrets")

    sealed = Secret.objects.get().sealed
    assert sealed != old
    assert Fernet(new_key.encode()).decrypt(sealed.encode()).decode() == VALUE
    settings.SECRETS_KEYS = [new_key]  # the old key dropped: the value still opens
    assert selectors.secret_values(acme.project, ["HF_TOKEN"]) == {"HF_TOKEN": VALUE}


@pytest.mark.django_db
def test_another_organizations_secret_is_not_found(build: Builder, acme: Tenant) -> None:
    other = tenant(build, "Initech")
    secret = create(other)
    client = client_with_key(acme.admin_key)

    assert client.get(f"/api/v1/secrets/{secret['id']}").status_code == 404
    assert client.patch(f"/api/v1/secrets/{secret['id']}", {"value": "x"}).status_code == 404
    assert client.delete(f"/api/v1/secrets/{secret['id']}").status_code == 404
    assert client.get("/api/v1/secrets").json()["results"] == []
    into_other = client.post(
        "/api/v1/secrets",
        {"project": str(other.project.pk), "name": "X", "value": "v"},
        format="json",
    )
    assert into_other.status_code == 400
    assert list(into_other.json()["error"]["fields"]) == ["project"]


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.MEMBER, Role.VIEWER, Role.BILLING])
def test_members_below_admin_neither_write_nor_list(
    build: Builder, acme: Tenant, role: Role
) -> None:
    secret = create(acme)
    user = build.member(acme.organization, role).user
    client = client_with_key(build.key(acme.organization, user)[1])

    created = client.post(
        "/api/v1/secrets",
        {"project": str(acme.project.pk), "name": "MINE", "value": "v"},
        format="json",
    )
    assert created.status_code in {400, 403}
    assert client.get("/api/v1/secrets").json()["results"] == []
    assert client.get(f"/api/v1/secrets/{secret['id']}").status_code == 404
    assert client.patch(f"/api/v1/secrets/{secret['id']}", {"value": "x"}).status_code == 404
    assert Secret.objects.count() == 1


@pytest.mark.django_db
def test_delete(acme: Tenant) -> None:
    secret = create(acme)

    response = client_with_key(acme.admin_key).delete(f"/api/v1/secrets/{secret['id']}")

    assert response.status_code == 204
    assert not Secret.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("1BAD", "v", "name"),
        ("has-dash", "v", "name"),
        ("NEOCLOUD_TOKEN", "v", "name"),
        ("A" * 129, "v", "name"),
        ("OK", "x" * (32 * 1024 + 1), "value"),
        ("OK", "é" * (16 * 1024 + 1), "value"),
    ],
    ids=["digit-first", "dash", "reserved", "long-name", "long-value", "long-value-bytes"],
)
def test_bad_secrets_are_refused(acme: Tenant, name: str, value: str, field: str) -> None:
    response = client_with_key(acme.admin_key).post(
        "/api/v1/secrets",
        {"project": str(acme.project.pk), "name": name, "value": value},
        format="json",
    )

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]
    assert not Secret.objects.exists()
