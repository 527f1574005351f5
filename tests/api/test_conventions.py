"""The API's shared conventions: root, schema, docs and the one JSON error shape."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.smoke
def test_api_root_links_the_schema_and_docs(client: Client) -> None:
    response = client.get("/api/v1/")

    assert response.status_code == 200
    assert response.json()["schema"].endswith("/api/schema/")
    assert response.json()["docs"].endswith("/api/docs/")


@pytest.mark.smoke
def test_openapi_schema_is_served(client: Client) -> None:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/" in schema["paths"]


def test_swagger_docs_are_served(client: Client) -> None:
    assert client.get("/api/docs/").status_code == 200


@pytest.mark.smoke
def test_unknown_api_path_is_a_json_error_not_an_html_page(client: Client) -> None:
    response = client.get("/api/v1/no-such-thing/")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "error": {"code": "not_found", "message": "No such resource.", "fields": {}}
    }


@pytest.mark.smoke
def test_api_errors_are_json_in_debug_mode_too(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True

    response = client.get("/api/v1/no-such-thing/")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_unhandled_api_error_is_a_json_500(client: Client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from neocloud.api import root

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(root, "reverse", explode)
    client.raise_request_exception = False

    response = client.get("/api/v1/")

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "server_error"
    assert "boom" not in response.content.decode()


def test_session_login_works_and_writes_need_the_csrf_token(build) -> None:  # type: ignore[no-untyped-def]
    owner = build.user("owner@acme.example")
    org = build.organization(owner=owner)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)

    read = browser.get("/api/v1/me")
    forged = browser.post(
        "/api/v1/projects",
        {"organization": str(org.pk), "name": "X"},
        content_type="application/json",
    )
    token = browser.get("/admin/login/").cookies.get("csrftoken")
    assert token is not None
    honest = browser.post(
        "/api/v1/projects",
        {"organization": str(org.pk), "name": "X"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token.value,
    )

    assert read.json()["email"] == "owner@acme.example"
    assert forged.status_code == 403
    assert "CSRF" in forged.json()["error"]["message"]
    assert honest.status_code == 201
