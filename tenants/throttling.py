"""Throttles: per API key (or signed-in user) and per IP for anonymous calls.

A throttled call is 429 with ``Retry-After`` (DRF sets it from ``wait()``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle

from neocloud.core.addresses import client_address

if TYPE_CHECKING:  # rest_framework.views imports this module through the settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class PerKeyThrottle(SimpleRateThrottle):
    scope = "key"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        from tenants.models import ApiKey

        if isinstance(request.auth, ApiKey):
            ident = f"key:{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            return None
        return self.cache_format % {"scope": self.scope, "ident": ident}


class PerIpThrottle(AnonRateThrottle):
    """Per caller address as ``client_address`` tells it: DRF's own would take a client's
    ``X-Forwarded-For`` whole, so any header made a new caller."""

    scope = "anon"

    def get_ident(self, request: Request) -> str:
        return client_address(request)
