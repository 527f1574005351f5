"""The actor of an API request, built once per request."""

from __future__ import annotations

from django.http import HttpRequest
from rest_framework.request import Request

from neocloud.core.correlation import HEADER, correlation_from
from tenants.access import Actor
from tenants.models import ApiKey, User


def request_correlation(request: Request | HttpRequest) -> str:
    """The id ``neocloud.middleware`` gave the request (also in its log lines and response),
    or, where the middleware did not run (a request factory), the caller's."""
    given: str | None = getattr(request, "correlation_id", None)
    return given or correlation_from(request.headers.get(HEADER))


def actor_for(request: Request) -> Actor:
    cached: Actor | None = getattr(request, "_neocloud_actor", None)
    if cached is not None:
        return cached
    user = request.user if isinstance(request.user, User) else None
    api_key = request.auth if isinstance(request.auth, ApiKey) else None
    actor = Actor(
        user=user,
        api_key=api_key,
        correlation_id=request_correlation(request),
        idempotency_key=request.headers.get("Idempotency-Key"),
    )
    request._neocloud_actor = actor  # type: ignore[attr-defined]
    return actor
