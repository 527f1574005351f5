"""The actor of an API request, built once per request."""

from __future__ import annotations

import uuid

from rest_framework.request import Request

from tenants.access import Actor
from tenants.models import ApiKey, User

CORRELATION_HEADER = "X-Request-ID"


def actor_for(request: Request) -> Actor:
    cached: Actor | None = getattr(request, "_neocloud_actor", None)
    if cached is not None:
        return cached
    user = request.user if isinstance(request.user, User) else None
    api_key = request.auth if isinstance(request.auth, ApiKey) else None
    actor = Actor(
        user=user,
        api_key=api_key,
        correlation_id=request.headers.get(CORRELATION_HEADER) or str(uuid.uuid4()),
        idempotency_key=request.headers.get("Idempotency-Key"),
    )
    request._neocloud_actor = actor  # type: ignore[attr-defined]
    return actor
