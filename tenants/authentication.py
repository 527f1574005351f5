"""``Authorization: Bearer <api key>`` for DRF."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, Subquery
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants import secrets
from tenants.models import ApiKey, Membership
from tenants.services import api_key_mark_used

MEMBERSHIP_FIELDS = ("id", "role", "projects_scope", "created_at")


def _key_with_membership(prefix: str) -> ApiKey | None:
    """The key, its user and the user's membership in the key's organization: one query,
    since every authenticated request needs all three."""
    membership = Membership.objects.filter(
        organization_id=OuterRef("organization_id"), user_id=OuterRef("user_id")
    )
    api_key = (
        ApiKey.objects.select_related("user")
        .annotate(**{f"m_{f}": Subquery(membership.values(f)[:1]) for f in MEMBERSHIP_FIELDS})
        .filter(prefix=prefix)
        .first()
    )
    if api_key is None:
        return None
    values = {f: getattr(api_key, f"m_{f}") for f in MEMBERSHIP_FIELDS}
    values |= {"organization_id": api_key.organization_id, "user_id": api_key.user_id}
    # from_db takes the values in the order of the model's concrete fields.
    fields = [f.attname for f in Membership._meta.concrete_fields]
    # Read by tenants.access.Actor.memberships.
    api_key.membership = (  # type: ignore[attr-defined]
        Membership.from_db("default", fields, [values[f] for f in fields])
        if values["id"] is not None
        else None
    )
    return api_key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """A revoked or expired key fails at once: every request reads the key's row."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header:
            return None
        keyword, _, key = header.partition(" ")
        if keyword != self.keyword:
            return None
        key = key.strip()
        prefix = secrets.api_key_prefix(key)
        api_key = _key_with_membership(prefix) if prefix else None
        if api_key is None or not secrets.matches(key, api_key.key_hash):
            raise exceptions.AuthenticationFailed("invalid API key")
        if api_key.revoked_at is not None:
            raise exceptions.AuthenticationFailed("this API key was revoked")
        if api_key.expires_at is not None and api_key.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed("this API key has expired")
        if not api_key.user.is_active:
            raise exceptions.AuthenticationFailed("this user is deactivated")
        api_key_mark_used(api_key)
        return api_key.user, api_key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'
