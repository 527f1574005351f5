"""A key never makes a key wider than itself: in scope, project or expiry. A session (no key)
is limited by the role only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from events.models import Event
from tenants import access, services
from tenants.access import Action, Actor
from tenants.errors import KeyWiderThanCreator
from tenants.models import ApiKey, Membership, Organization, Project, Role, Scope, User
from tests.builders import Builder, client_with_key, run

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


@pytest.fixture
def org(build: Builder) -> Organization:
    return build.organization("Acme", owner=build.user("owner@acme.example"))


@pytest.fixture
def mine(build: Builder, org: Organization) -> Project:
    return build.project(org, "Mine")


@pytest.fixture
def other(build: Builder, org: Organization) -> Project:
    return build.project(org, "Other")


def owner_user(org: Organization) -> User:
    return Membership.objects.get(organization=org, role=Role.OWNER).user


def made_by(api_key: ApiKey, org: Organization, **wanted: Any) -> ApiKey:
    made, _ = run(
        services.api_key_create,
        actor=Actor(user=api_key.user, api_key=api_key),
        organization=org,
        name="made by a key",
        **{"scopes": [Scope.READ], **wanted},
    )
    return made  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("creator", "wanted", "field"),
    [
        ("project", {}, "project"),
        ("project", {"project": "other"}, "project"),
        ("expiring", {}, "expires_at"),
        ("expiring", {"expires_at": 2 * DAY}, "expires_at"),
    ],
    ids=[
        "project-key-makes-an-organization-key",
        "project-key-makes-another-projects-key",
        "expiring-key-makes-a-key-that-never-expires",
        "expiring-key-makes-a-key-expiring-later",
    ],
)
def test_a_key_never_makes_a_wider_key(
    build: Builder,
    org: Organization,
    mine: Project,
    other: Project,
    creator: str,
    wanted: dict[str, Any],
    field: str,
) -> None:
    now = timezone.now()
    choices: dict[str, dict[str, Any]] = {
        "project": {"project": mine},
        "expiring": {"expires_at": now + DAY},
    }
    limits = choices[creator]
    creator_key, _ = build.key(org, owner_user(org), **limits)
    if wanted.get("project") == "other":
        wanted = {"project": other}
    if "expires_at" in wanted:
        wanted = {"expires_at": now + wanted["expires_at"]}
    before = (ApiKey.objects.count(), Event.objects.count())

    with pytest.raises(KeyWiderThanCreator) as refused:
        made_by(creator_key, org, **wanted)

    assert refused.value.code == "key_wider_than_creator"
    assert list(refused.value.fields) == [field]
    assert (ApiKey.objects.count(), Event.objects.count()) == before


def test_a_key_makes_keys_within_itself(build: Builder, org: Organization, mine: Project) -> None:
    expiry = timezone.now() + DAY
    creator_key, _ = build.key(
        org, owner_user(org), scopes=[Scope.ADMIN], project=mine, expires_at=expiry
    )

    same = made_by(creator_key, org, scopes=[Scope.ADMIN], project=mine, expires_at=expiry)
    sooner = made_by(creator_key, org, project=mine, expires_at=expiry - timedelta(hours=1))

    assert (same.scopes, same.project_id, same.expires_at) == (["admin"], mine.pk, expiry)
    # The admin scope implies read: a narrower key is no wider.
    assert (sooner.scopes, sooner.project_id) == (["read"], mine.pk)


def test_a_session_makes_organization_keys_that_never_expire(org: Organization) -> None:
    made, _ = run(
        services.api_key_create,
        actor=Actor(user=owner_user(org)),
        organization=org,
        name="from the console",
        scopes=[Scope.READ, Scope.WRITE, Scope.ADMIN],
    )

    assert (made.project_id, made.expires_at) == (None, None)


def test_the_api_refuses_a_wider_key_with_the_field(
    build: Builder, org: Organization, mine: Project
) -> None:
    _, secret = build.key(org, owner_user(org), project=mine)

    response = client_with_key(secret).post(
        "/api/v1/api-keys",
        {"organization": str(org.pk), "name": "wider", "scopes": ["read"]},
        format="json",
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], list(error["fields"])) == ("key_wider_than_creator", ["project"])


def test_a_key_never_grants_a_scope_it_lacks(
    build: Builder, org: Organization, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Today only admin keys make keys, and admin implies every scope; the rule holds for a
    # table that lets write keys make keys too.
    monkeypatch.setitem(
        access.PERMISSIONS, Action.API_KEY_OWN, access.Permission(access.ALL_ROLES, Scope.WRITE)
    )
    creator_key, _ = build.key(org, owner_user(org), scopes=[Scope.WRITE])

    with pytest.raises(KeyWiderThanCreator) as refused:
        made_by(creator_key, org, scopes=[Scope.READ, Scope.ADMIN])

    assert refused.value.fields == {"scopes": ["the creating key lacks admin"]}
    assert made_by(creator_key, org, scopes=[Scope.READ]).scopes == ["read"]
