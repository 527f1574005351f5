"""``Idempotency-Key`` on creating POSTs."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from neocloud.models import IdempotencyRecord
from tenants.models import ApiKey, Organization, Project
from tests.builders import Builder, client_with_key


@pytest.fixture
def owner_secret(build: Builder) -> tuple[Organization, str]:
    owner = build.user("owner@acme.example")
    org = build.organization("Acme", owner=owner)
    return org, build.key(org, owner)[1]


def _post_project(secret: str, org: Organization, name: str, key: str | None = "k-1"):  # type: ignore[no-untyped-def]
    headers: dict[str, Any] = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return client_with_key(secret).post(
        "/api/v1/projects", {"organization": str(org.pk), "name": name}, format="json", **headers
    )


@pytest.mark.django_db
def test_the_same_key_and_body_return_the_stored_response(
    owner_secret: tuple[Organization, str],
) -> None:
    org, secret = owner_secret

    first = _post_project(secret, org, "Vision")
    second = _post_project(secret, org, "Vision")

    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Project.objects.filter(organization=org).count() == 1


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_422(owner_secret: tuple[Organization, str]) -> None:
    org, secret = owner_secret
    _post_project(secret, org, "Vision")

    response = _post_project(secret, org, "Other")

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Project.objects.filter(organization=org).count() == 1


@pytest.mark.django_db
def test_keys_belong_to_their_caller(
    build: Builder, owner_secret: tuple[Organization, str]
) -> None:
    org, secret = owner_secret
    other_secret = build.key(org, org.membership_set.get().user)[1]

    _post_project(secret, org, "Vision")
    response = _post_project(other_secret, org, "Vision-2")

    assert response.status_code == 201


@pytest.mark.django_db
def test_a_key_expires_after_24_hours(owner_secret: tuple[Organization, str]) -> None:
    org, secret = owner_secret
    _post_project(secret, org, "Vision")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=24, seconds=1))

    response = _post_project(secret, org, "Other")

    assert response.status_code == 201
    assert Project.objects.filter(organization=org).count() == 2


@pytest.mark.django_db
def test_a_failed_request_releases_its_key(owner_secret: tuple[Organization, str]) -> None:
    org, secret = owner_secret
    _post_project(secret, org, "Vision", key=None)

    duplicate = _post_project(secret, org, "Vision")  # slug taken: 409
    retried = _post_project(secret, org, "Vision")

    assert duplicate.status_code == retried.status_code == 409
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_a_replayed_key_creation_never_shows_the_secret_again(
    owner_secret: tuple[Organization, str],
) -> None:
    org, secret = owner_secret
    body = {"organization": str(org.pk), "name": "ci", "scopes": ["read"]}
    client = client_with_key(secret)

    first = client.post("/api/v1/api-keys", body, format="json", HTTP_IDEMPOTENCY_KEY="key-1")
    second = client.post("/api/v1/api-keys", body, format="json", HTTP_IDEMPOTENCY_KEY="key-1")

    assert first.json()["secret"]
    assert second.json()["secret"] is None
    assert second.json()["id"] == first.json()["id"]
    assert ApiKey.objects.filter(name="ci").count() == 1
    assert first.json()["secret"] not in str(IdempotencyRecord.objects.values_list("body"))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("callers", [2, 4])
def test_simultaneous_requests_with_one_key_create_once(
    owner_secret: tuple[Organization, str], callers: int
) -> None:
    org, secret = owner_secret
    barrier = threading.Barrier(callers)
    responses: list[tuple[int, dict[str, object]]] = []

    def post() -> None:
        barrier.wait()
        try:
            response = _post_project(secret, org, "Vision", key="same-key")
            responses.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [status for status, _ in responses] == [201] * callers
    assert all(body == responses[0][1] for _, body in responses)
    assert Project.objects.filter(organization=org).count() == 1


@pytest.mark.django_db
def test_idempotency_key_is_documented_on_creating_posts(client) -> None:  # type: ignore[no-untyped-def]
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    post = schema["paths"]["/api/v1/projects"]["post"]
    assert "Idempotency-Key" in [p["name"] for p in post["parameters"]]
    assert {"400", "401", "403", "409", "422", "429"} <= set(post["responses"])
