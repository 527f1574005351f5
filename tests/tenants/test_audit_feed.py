"""The audit feed shows what a tenant's admin may see of the log: never a credential or its
hash, in any event type."""

from __future__ import annotations

from typing import Any

import pytest

from neocloud.core.redaction import REDACTED, is_credential
from tenants import events as ev
from tenants import services
from tenants.models import ApiKey, Invitation, Membership, Organization, Role
from tests.builders import Builder, client_with_key, run

pytestmark = pytest.mark.django_db


def credentials_in(value: Any, path: str = "data") -> list[str]:
    """Where a credential-like field holds anything but the redaction mark."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if is_credential(key) and item != REDACTED:
                found.append(f"{path}.{key}")
            else:
                found += credentials_in(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += credentials_in(item, f"{path}[{index}]")
    return found


@pytest.fixture
def org(build: Builder) -> Organization:
    """An organization with an event of every tenancy kind that carries a credential."""
    org = build.organization("Acme", owner=build.user("owner@acme.example"))
    project = build.project(org)
    member = build.member(org, Role.MEMBER)
    build.key(org, member.user, project=project)
    run(services.invitation_create, organization=org, email="new@acme.example", role=Role.VIEWER)
    run(services.quota_set, organization=org, gpu_model="h100", max_gpus=8)
    return org


def test_no_event_in_the_feed_carries_a_credential(build: Builder, org: Organization) -> None:
    owner = Membership.objects.get(organization=org, role=Role.OWNER).user
    response = client_with_key(build.key(org, owner)[1]).get(
        f"/api/v1/organizations/{org.pk}/events", {"page_size": 1000}
    )

    events = response.json()["results"]
    assert {ev.ApiKeyCreated.event_type, ev.InvitationCreated.event_type} <= {
        e["type"] for e in events
    }
    assert {e["type"]: credentials_in(e["data"]) for e in events} == {e["type"]: [] for e in events}
    hashes = [*ApiKey.objects.values_list("key_hash", flat=True)]
    hashes += Invitation.objects.values_list("token_hash", flat=True)
    assert [h for h in hashes if h in response.content.decode()] == []
    created = next(e for e in events if e["type"] == ev.ApiKeyCreated.event_type)
    # What an admin may see stays: who, which key, which scopes.
    assert created["data"]["key_hash"] == REDACTED
    assert created["data"]["prefix"] == ApiKey.objects.get(pk=created["data"]["api_key_id"]).prefix
