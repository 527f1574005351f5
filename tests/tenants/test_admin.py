"""Operators' admin: writes go through the services, so they are events too."""

from __future__ import annotations

import pytest
from django.test import Client

from events import store
from tenants import events as ev
from tenants.models import (
    ApiKey,
    Membership,
    Organization,
    OrganizationStatus,
    Quota,
    Role,
    User,
)
from tests.builders import Builder

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))
    return client


def _types(org: Organization) -> list[str]:
    return [e.type for e in store.read_stream(ev.ORGANIZATION_STREAM, str(org.pk))]


def test_an_operator_creates_an_organization_in_the_admin(operator: Client) -> None:
    response = operator.post(
        "/admin/tenants/organization/add/",
        {
            "name": "Globex",
            "slug": "globex",
            "billing_email": "ap@globex.example",
            "owner_email": "hank@globex.example",
        },
    )

    org = Organization.objects.get(slug="globex")
    assert response.status_code == 302
    assert Membership.objects.get(organization=org).role == Role.OWNER
    assert _types(org) == [ev.OrganizationCreated.event_type, ev.MemberAdded.event_type]
    assert (
        store.read_stream(ev.ORGANIZATION_STREAM, str(org.pk))[0]
        .metadata["actor"]
        .startswith("user:")
    )


def test_suspending_in_the_admin_is_an_event(build: Builder, operator: Client) -> None:
    org = build.organization()

    operator.post(
        "/admin/tenants/organization/",
        {
            "action": "suspend",
            "_selected_action": [str(org.pk)],
        },
    )

    assert Organization.objects.get(pk=org.pk).status == OrganizationStatus.SUSPENDED
    assert _types(org)[-1] == ev.OrganizationSuspended.event_type


def test_a_refused_write_shows_its_reason(build: Builder, operator: Client) -> None:
    org = build.organization()
    project = build.project(org)
    build.project(org, "Other")
    operator.post(
        "/admin/tenants/quota/add/",
        {
            "organization": str(org.pk),
            "gpu_model": "h100",
            "max_gpus": "4",
        },
    )

    response = operator.post(
        "/admin/tenants/quota/add/",
        {
            "organization": str(org.pk),
            "project": str(project.pk),
            "gpu_model": "h100",
            "max_gpus": "8",
        },
        follow=True,
    )

    shown = [str(message) for message in response.context["messages"]]
    assert any(m.startswith("quota_exceeds_organization:") for m in shown)
    assert list(Quota.objects.values_list("max_gpus", flat=True)) == [4]


def test_revoking_keys_in_the_admin(build: Builder, operator: Client) -> None:
    owner = build.user()
    org = build.organization(owner=owner)
    api_key, _ = build.key(org, owner)

    operator.post(
        "/admin/tenants/apikey/",
        {
            "action": "revoke",
            "_selected_action": [str(api_key.pk)],
        },
    )

    assert ApiKey.objects.get(pk=api_key.pk).revoked_at is not None
    assert _types(org)[-1] == ev.ApiKeyRevoked.event_type


@pytest.mark.parametrize(
    "page", ["organization", "project", "membership", "invitation", "apikey", "quota", "user"]
)
def test_admin_lists_search_and_filter(build: Builder, operator: Client, page: str) -> None:
    build.organization("Searchable")

    response = operator.get(f"/admin/tenants/{page}/?q=searchable")

    assert response.status_code == 200
