"""Every endpoint by every kind of caller, with the status each must get.

A new endpoint is one row. Every endpoint needs authentication, so anonymous callers and
revoked or expired keys are 401 on every row (checked for all rows below the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tenants.models import ApiKey, Role, Scope
from tests.builders import Builder, client_with_key

pytestmark = pytest.mark.django_db

PERSONAS = ["owner", "admin", "member", "viewer", "billing", "other_owner", "read_key"]
UNAUTHENTICATED = ["anonymous", "revoked_key", "expired_key"]


@dataclass
class World:
    ids: dict[str, str]
    secrets: dict[str, str | None]

    def path(self, template: str) -> str:
        return template.format(**self.ids)


@pytest.fixture
def world(build: Builder) -> World:
    owner = build.user("owner@a.example")
    org = build.organization("Org A", owner=owner)
    project = build.project(org)
    members = {
        role: build.member(org, role)
        for role in (Role.ADMIN, Role.MEMBER, Role.VIEWER, Role.BILLING)
    }
    target = build.member(org, Role.MEMBER)
    target_key, _ = build.key(org, target.user)
    other = build.organization("Org B", owner=build.user("owner@b.example"))
    secrets: dict[str, str | None] = {"anonymous": None}
    secrets["owner"] = build.key(org, owner)[1]
    for role, membership in members.items():
        secrets[str(role)] = build.key(org, membership.user)[1]
    secrets["other_owner"] = build.key(other, other.membership_set.get().user)[1]
    secrets["read_key"] = build.key(org, owner, scopes=[Scope.READ])[1]
    revoked, secrets["revoked_key"] = build.key(org, owner)
    ApiKey.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    expired, secrets["expired_key"] = build.key(org, owner)
    # Time passes: the key's expiry is now behind us.
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    ids = {
        "org": str(org.pk),
        "other_org": str(other.pk),
        "project": str(project.pk),
        "target": str(target.pk),
        "target_key": str(target_key.pk),
        "viewer_membership": str(members[Role.VIEWER].pk),
        "admin_membership": str(members[Role.ADMIN].pk),
    }
    return World(ids=ids, secrets=secrets)


def expect(default: int, **overrides: int) -> dict[str, int]:
    """Statuses per persona. The owner's read-only key reads like the owner and is refused
    every write (403), unless a row says otherwise."""
    statuses = {persona: overrides.get(persona, default) for persona in PERSONAS}
    if "read_key" not in overrides:
        owner = statuses["owner"]
        statuses["read_key"] = owner if owner == 200 and default == 200 else 403
    return statuses


def reads(default: int, **overrides: int) -> dict[str, int]:
    return expect(default, **{"read_key": overrides.get("owner", default), **overrides})


MANAGERS_ONLY = {"owner": 200, "admin": 200}
# (method, path, body, expected status per persona)
MATRIX: list[tuple[str, str, dict[str, Any] | None, dict[str, int]]] = [
    ("get", "/api/v1/me", None, expect(200)),
    ("get", "/api/v1/organizations", None, expect(200)),
    ("get", "/api/v1/organizations/{org}", None, reads(200, other_owner=404)),
    (
        "patch",
        "/api/v1/organizations/{org}",
        {"name": "New"},
        expect(403, **MANAGERS_ONLY, other_owner=404),
    ),
    ("post", "/api/v1/organizations", {"name": "X", "owner_email": "x@example.com"}, expect(403)),
    ("post", "/api/v1/organizations/{org}/suspend", {"reason": "r"}, expect(403, other_owner=404)),
    ("post", "/api/v1/organizations/{org}/reactivate", None, expect(403, other_owner=404)),
    (
        "get",
        "/api/v1/organizations/{org}/events",
        None,
        reads(403, **MANAGERS_ONLY, other_owner=404),
    ),
    ("get", "/api/v1/projects", None, expect(200)),
    ("get", "/api/v1/projects/{project}", None, reads(200, billing=404, other_owner=404)),
    (
        "post",
        "/api/v1/projects",
        {"organization": "{org}", "name": "New"},
        expect(403, owner=201, admin=201, other_owner=400),
    ),
    (
        "patch",
        "/api/v1/projects/{project}",
        {"description": "d"},
        expect(403, **MANAGERS_ONLY, billing=404, other_owner=404),
    ),
    ("get", "/api/v1/members", None, expect(200)),
    ("get", "/api/v1/members/{target}", None, reads(200, billing=404, other_owner=404)),
    (
        "patch",
        "/api/v1/members/{target}",
        {"role": "viewer"},
        expect(403, **MANAGERS_ONLY, billing=404, other_owner=404),
    ),
    (
        "delete",
        "/api/v1/members/{target}",
        None,
        expect(403, owner=204, admin=204, billing=404, other_owner=404),
    ),
    # Leaving is managing oneself: a key needs the admin scope, so the viewer's read-only key
    # cannot remove its own membership, and the admin's key can.
    (
        "delete",
        "/api/v1/members/{viewer_membership}",
        None,
        expect(403, owner=204, admin=204, billing=404, other_owner=404),
    ),
    (
        "delete",
        "/api/v1/members/{admin_membership}",
        None,
        expect(403, owner=204, admin=204, billing=404, other_owner=404),
    ),
    ("get", "/api/v1/invitations", None, expect(200)),
    (
        "post",
        "/api/v1/invitations",
        {"organization": "{org}", "email": "n@example.com", "role": "member"},
        expect(403, owner=201, admin=201, other_owner=400),
    ),
    ("get", "/api/v1/api-keys", None, expect(200)),
    (
        "post",
        "/api/v1/api-keys",
        {"organization": "{org}", "name": "n", "scopes": ["read"]},
        expect(403, owner=201, admin=201, other_owner=400),
    ),
    (
        "post",
        "/api/v1/api-keys/{target_key}/revoke",
        None,
        expect(404, **MANAGERS_ONLY, read_key=404),
    ),
    ("get", "/api/v1/quotas", None, expect(200)),
    (
        "post",
        "/api/v1/quotas",
        {"organization": "{org}", "gpu_model": "h100", "max_gpus": 8},
        expect(403, other_owner=400),
    ),
]


def _request(
    world: World, persona: str, method: str, path: str, body: dict[str, Any] | None
) -> int:
    client = client_with_key(world.secrets[persona])
    data = {k: world.path(v) if isinstance(v, str) else v for k, v in (body or {}).items()}
    response = getattr(client, method)(world.path(path), data or None, format="json")
    if response.status_code != 204:
        assert response["Content-Type"].startswith("application/json")
    return int(response.status_code)


@pytest.mark.parametrize(
    ("method", "path", "body", "persona", "status"),
    [
        pytest.param(method, path, body, persona, status, id=f"{method} {path} as {persona}")
        for method, path, body, expected in MATRIX
        for persona, status in expected.items()
    ],
)
def test_permission_matrix(
    world: World, method: str, path: str, body: dict[str, Any] | None, persona: str, status: int
) -> None:
    assert _request(world, persona, method, path, body) == status


@pytest.mark.parametrize(
    ("method", "path", "body", "persona"),
    [
        pytest.param(method, path, body, persona, id=f"{method} {path} as {persona}")
        for method, path, body, _ in MATRIX
        for persona in UNAUTHENTICATED
    ],
)
def test_unauthenticated_callers_get_401_everywhere(
    world: World, method: str, path: str, body: dict[str, Any] | None, persona: str
) -> None:
    assert _request(world, persona, method, path, body) == 401
