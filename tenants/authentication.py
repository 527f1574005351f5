"""``Authorization: Bearer <api key>`` for DRF."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants import secrets, selectors
from tenants.models import ApiKey
from tenants.services import api_key_mark_used


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
        api_key = selectors.api_key_for_prefix(prefix) if prefix else None
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
