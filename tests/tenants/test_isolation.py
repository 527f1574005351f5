"""Tenant A never sees tenant B: not in lists, not by id, not in the audit feed."""

from __future__ import annotations

import pytest

from tenants import events as ev
from tenants import services
from tenants.models import Organization, Project, Role
from tests.builders import Builder, client_with_key, run

pytestmark = pytest.mark.django_db

LISTS = ["organizations", "projects", "members", "invitations", "api-keys", "quotas"]


def _populate(build: Builder, name: str) -> tuple[Organization, str]:
    owner = build.user(f"owner@{name}.example")
    org = build.organization(name, owner=owner)
    project = build.project(org)
    member = build.member(org, Role.MEMBER)
    build.key(org, member.user)
    run(services.invitation_create, organization=org, email=f"new@{name}.example", role=Role.VIEWER)
    run(services.quota_set, organization=org, gpu_model="h100", max_gpus=8)
    run(services.quota_set, organization=org, project=project, gpu_model="h100", max_gpus=4)
    return org, build.key(org, owner)[1]


@pytest.fixture
def tenants(build: Builder) -> dict[str, tuple[Organization, str]]:
    return {name: _populate(build, name) for name in ("alpha", "beta")}


@pytest.mark.parametrize("resource", LISTS)
def test_lists_hold_only_the_callers_tenant(
    tenants: dict[str, tuple[Organization, str]], resource: str
) -> None:
    for org, secret in tenants.values():
        results = client_with_key(secret).get(f"/api/v1/{resource}").json()["results"]

        assert results, f"{resource} should not be empty for its own tenant"
        owners = {r["id"] if resource == "organizations" else r["organization"] for r in results}
        assert owners == {str(org.pk)}


@pytest.mark.parametrize("resource", ["projects", "members", "invitations", "quotas"])
def test_another_tenants_object_is_404_by_id(
    tenants: dict[str, tuple[Organization, str]], resource: str
) -> None:
    alpha_secret = tenants["alpha"][1]
    beta_secret = tenants["beta"][1]
    ids = [
        r["id"] for r in client_with_key(alpha_secret).get(f"/api/v1/{resource}").json()["results"]
    ]

    for object_id in ids:
        response = client_with_key(beta_secret).get(f"/api/v1/{resource}/{object_id}")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_the_audit_feed_holds_only_the_organizations_events(
    tenants: dict[str, tuple[Organization, str]],
) -> None:
    alpha, secret = tenants["alpha"]

    feed = client_with_key(secret).get(f"/api/v1/organizations/{alpha.pk}/events").json()

    assert {e["stream_id"] for e in feed["results"]} == {str(alpha.pk)}
    assert feed["results"][0]["position"] > feed["results"][-1]["position"]  # newest first
    types = {e["type"] for e in feed["results"]}
    assert {
        ev.OrganizationCreated.event_type,
        ev.QuotaSet.event_type,
        ev.ApiKeyCreated.event_type,
    } <= types


def test_a_filter_by_another_tenants_organization_returns_nothing(
    tenants: dict[str, tuple[Organization, str]],
) -> None:
    beta = tenants["beta"][0]
    alpha_secret = tenants["alpha"][1]

    response = client_with_key(alpha_secret).get(f"/api/v1/projects?organization={beta.pk}")

    assert response.status_code == 200
    assert response.json()["results"] == []
    assert Project.objects.filter(organization=beta).exists()
