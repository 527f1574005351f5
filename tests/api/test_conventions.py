"""The API's shared conventions: root, schema, docs and the one JSON error shape."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import spectacular_settings
from rest_framework import serializers

from inventory.authentication import NodeTokenAuthentication
from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import StrictDictField, StrictListField, StrictType, UniqueListField
from neocloud.api.schema_view import SchemaView

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


def _request_serializers() -> list[tuple[type[serializers.Serializer], Any]]:  # type: ignore[type-arg]
    """The serializer each operation documents as its request body, and its view."""
    generator = SchemaGenerator()  # type: ignore[no-untyped-call]
    generator._initialise_endpoints()  # type: ignore[no-untyped-call]
    found = []
    for path, _, method, view in generator._get_paths_and_endpoints():  # type: ignore[no-untyped-call]
        view.request = spectacular_settings.GET_MOCK_REQUEST(method, path, view, None)
        request = view.schema.get_request_serializer()
        if request is not None and method in {"POST", "PUT", "PATCH"}:
            found.append((request if isinstance(request, type) else type(request), view))
    return found


REQUEST_SERIALIZERS = _request_serializers()


def _request_fields() -> list[tuple[str, Any]]:
    """Every writable field of each request body, nested ones included."""
    found: dict[str, Any] = {}
    for kind, _ in REQUEST_SERIALIZERS:
        _collect(kind, found)
    return sorted(found.items())


def _collect(kind: type[serializers.Serializer], found: dict[str, Any]) -> None:  # type: ignore[type-arg]
    for name, field in kind().fields.items():
        if field.read_only:
            continue
        found[f"{kind.__name__}.{name}"] = field
        nested = getattr(field, "child", field)
        if isinstance(nested, serializers.Serializer):
            _collect(type(nested), found)


REQUEST_FIELDS = _request_fields()


def _request_bodies() -> dict[str, tuple[type, bool]]:
    """Each serializer of a request body, nested ones included, and whether a node agent
    sends it (authenticated by its node token) rather than a customer or an operator."""
    found: dict[str, tuple[type, bool]] = {}
    for request, view in REQUEST_SERIALIZERS:
        agent = NodeTokenAuthentication in getattr(view, "authentication_classes", ())
        pending = [request]
        while pending:
            kind = pending.pop()
            found[kind.__name__] = (kind, agent)
            for field in kind().fields.values():
                nested = getattr(field, "child", field)
                if not field.read_only and isinstance(nested, serializers.Serializer):
                    pending.append(type(nested))
    return found


REQUEST_BODIES = _request_bodies()


def test_request_bodies_are_found() -> None:
    assert REQUEST_BODIES["WorkloadCreateSerializer"][1] is False
    assert REQUEST_BODIES["WhatIfReservationSerializer"][1] is False  # nested in the what-if's
    assert REQUEST_BODIES["HeartbeatSerializer"][1] is True
    assert REQUEST_BODIES["GpuReportSerializer"][1] is True


@pytest.mark.parametrize("name", sorted(REQUEST_BODIES))
def test_every_request_body_but_an_agents_refuses_names_it_does_not_take(name: str) -> None:
    """A customer's or an operator's misspelt field is a 400, not dropped; an agent newer than
    the server may say more than it reads (``neocloud.api.bodies``)."""
    kind, agent = REQUEST_BODIES[name]
    assert issubclass(kind, RequestSerializer) is not agent


def test_request_fields_are_found() -> None:
    names = dict(REQUEST_FIELDS)
    assert "WorkloadCreateSerializer.runtime_estimate_s" in names
    assert "GpuReportSerializer.healthy" in names  # nested in the heartbeat's
    assert len(names) > 60


@pytest.mark.parametrize(("name", "field"), REQUEST_FIELDS, ids=[n for n, _ in REQUEST_FIELDS])
def test_every_request_field_is_strict_and_bounded(name: str, field: Any) -> None:
    """A request field takes only its own JSON type (neocloud.api.fields) and has bounds:
    numbers a minimum and a maximum, strings and lists a maximum length."""
    if isinstance(field, serializers.ListSerializer):
        assert field.max_length is not None  # type: ignore[attr-defined]
        return
    if isinstance(field, serializers.Serializer):
        return  # an object: only a mapping passes, and its own fields are checked here too
    if isinstance(field, serializers.ListField):
        assert isinstance(field, UniqueListField | StrictListField)
        assert field.max_length is not None or isinstance(field.child, serializers.ChoiceField)
        field = field.child
    if isinstance(field, serializers.DictField):
        assert isinstance(field, StrictDictField)
        field = field.child
    assert isinstance(field, StrictType)
    if isinstance(field, serializers.IntegerField | serializers.FloatField):
        assert field.min_value is not None
        assert field.max_value is not None
    elif isinstance(field, serializers.DecimalField):
        assert field.max_value is not None
    elif isinstance(field, serializers.CharField):
        assert field.max_length is not None


def test_the_schema_is_made_once_not_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    generate = SchemaGenerator.get_schema

    def counted(self: SchemaGenerator, *args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return generate(self, *args, **kwargs)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    monkeypatch.setattr(SchemaView, "_made", {})
    accept = "application/vnd.oai.openapi+json"

    first = Client().get("/api/schema/", HTTP_ACCEPT=accept)
    second = Client().get("/api/schema/", HTTP_ACCEPT=accept)

    assert first.json() == second.json()
    assert first.json()["info"]["title"] == "NeoCloud API"
    assert len(made) == 1
