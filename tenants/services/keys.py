"""API keys: a member's, in one organization (optionally one project); only a hash is kept.

Concurrency: creating and revoking lock the organization's row, then append (``stream``'s
lock order). Marking a key used writes its row in place, without a lock or an event.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime, timedelta

from django.utils import timezone

from neocloud.core.errors import ValidationFailed
from tenants import events as ev
from tenants import secrets, selectors
from tenants.access import ROLE_SCOPES, Action, Actor
from tenants.errors import KeyWiderThanCreator, PermissionDenied, ScopeNotAllowed
from tenants.models import ApiKey, Organization, Project, User
from tenants.services.stream import organization_append, organization_locked


def api_key_create(
    *,
    actor: Actor,
    organization: Organization,
    name: str,
    scopes: Collection[str],
    project: Project | None = None,
    expires_at: datetime | None = None,
    user: User | None = None,
) -> tuple[ApiKey, str]:
    """A key for the actor (operators may make one for a member); the secret is returned
    here once and never stored."""
    organization = organization_locked(organization)
    actor.require(Action.API_KEY_OWN, organization)
    owner = user or actor.user
    if owner is None:
        raise PermissionDenied("a key belongs to the user who creates it")
    if owner != actor.user:
        actor.require(Action.API_KEY_ISSUE, organization)
    membership = selectors.membership_find(organization=organization, user=owner)
    if membership is None:
        raise PermissionDenied("the key's user is not a member of this organization")
    wanted = set(scopes)
    allowed = ROLE_SCOPES[membership.role]
    if not wanted or not wanted <= allowed:
        raise ScopeNotAllowed(
            f"a {membership.role} may hold keys with scopes {sorted(allowed)}",
            fields={"scopes": sorted(wanted - allowed) or ["empty"]},
        )
    if project is not None and project.organization_id != organization.id:
        raise ValidationFailed("project not in this organization", fields={"project": ["other"]})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationFailed("expiry is in the past", fields={"expires_at": ["past"]})
    _check_within_key(actor, wanted, project, expires_at)
    prefix, key = secrets.new_api_key()
    api_key_id = uuid.uuid4()
    organization_append(
        actor,
        organization,
        [
            ev.ApiKeyCreated(
                api_key_id=api_key_id,
                user_id=owner.pk,
                project_id=project.pk if project else None,
                name=name,
                prefix=prefix,
                key_hash=secrets.digest(key),
                scopes=sorted(wanted),
                expires_at=expires_at,
            )
        ],
    )
    return ApiKey.objects.get(pk=api_key_id), key


def _check_within_key(
    actor: Actor, scopes: set[str], project: Project | None, expires_at: datetime | None
) -> None:
    """A key makes only keys no wider than itself, or a stolen project key or a key about to
    expire would buy its holder a lasting organization-wide one. A session is not limited."""
    creator = actor.api_key
    if creator is None:
        return
    fields: dict[str, list[str]] = {}
    beyond = scopes - actor.granted_scopes
    if beyond:
        fields["scopes"] = [f"the creating key lacks {', '.join(sorted(beyond))}"]
    if creator.project_id is not None and (project is None or project.pk != creator.project_id):
        fields["project"] = [f"the creating key is limited to project {creator.project_id}"]
    if creator.expires_at is not None and (expires_at is None or expires_at > creator.expires_at):
        fields["expires_at"] = [
            f"the creating key expires at {creator.expires_at.isoformat()}: no later"
        ]
    if fields:
        raise KeyWiderThanCreator("a key makes no key wider than itself", fields=fields)


def api_key_revoke(*, actor: Actor, api_key: ApiKey) -> ApiKey:
    """Members revoke their own keys, managers any key of the organization; at once."""
    organization = organization_locked(api_key.organization)
    own = actor.user is not None and api_key.user_id == actor.user.pk
    actor.require(Action.API_KEY_OWN if own else Action.API_KEY_MANAGE, organization)
    if api_key.revoked_at is None:
        organization_append(actor, organization, [ev.ApiKeyRevoked(api_key_id=api_key.pk)])
    return ApiKey.objects.get(pk=api_key.pk)


def api_key_mark_used(api_key: ApiKey) -> None:
    """Telemetry, written in place at most once a minute (not an event: no business fact)."""
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > timedelta(minutes=1):
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
