"""``Idempotency-Key`` on creating POSTs.

The first request with a key claims it (an INSERT that commits before the work starts); the
work runs; its response is stored. A second request with the same key and body gets the
stored response (``Idempotent-Replayed: true``), or waits for it while the first is still
running; the same key with another body is 422. Keys expire after 24 hours. Only 2xx
responses are kept: after an error the key is released and the call can be retried.

Secrets in a response (an API key, an invitation token) are shown once: the stored copy has
them blanked, so a replay returns ``null`` in their place.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Collection
from datetime import timedelta
from functools import wraps
from typing import Any, TypeVar, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response

from neocloud.core.errors import ApplicationError, Conflict
from neocloud.models import IdempotencyRecord

HEADER = "Idempotency-Key"
TTL = timedelta(hours=24)
WAIT_FOR_FIRST_S = 10.0
MAX_KEY_LENGTH = 255

View = TypeVar("View", bound=Callable[..., Response])


class IdempotencyKeyReused(ApplicationError):
    """The ``Idempotency-Key`` was used before with another body."""

    code = "idempotency_key_reused"
    http_status = 422


class IdempotencyInProgress(Conflict):
    """A request with this ``Idempotency-Key`` is still running: send it again later."""

    code = "idempotency_in_progress"


class IdempotencyKeyInvalid(ApplicationError):
    """The ``Idempotency-Key`` header is empty or too long."""

    code = "idempotency_key_invalid"
    http_status = 400


def idempotent(
    *, redact: Collection[str] = (), unless: Callable[[Request], bool] | None = None
) -> Callable[[View], View]:
    """Make a DRF view method honour ``Idempotency-Key``. Keys are per caller: the view names
    its caller (``actor.label``, as ``tenants.viewsets.TenantViewSet`` has it), so this layer
    needs no app. A request ``unless`` holds for (a dry run) writes nothing, so its key is
    neither claimed nor its response stored: the real request with that key still runs."""

    def decorate(method: View) -> View:
        @wraps(method)
        def wrapper(view: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
            key = request.headers.get(HEADER)
            if key is None or (unless is not None and unless(request)):
                return method(view, request, *args, **kwargs)
            if not key or len(key) > MAX_KEY_LENGTH:
                raise IdempotencyKeyInvalid(
                    f"{HEADER} must be 1 to {MAX_KEY_LENGTH} characters",
                    fields={HEADER: ["invalid"]},
                )
            owner = view.actor.label
            fingerprint = _fingerprint(request)
            record, claimed = _claim(owner, key, fingerprint)
            if not claimed:
                return _replay(record, fingerprint)
            try:
                response = method(view, request, *args, **kwargs)
            except BaseException:
                _release(record)
                raise
            if not 200 <= response.status_code < 300:
                _release(record)
                return response
            _complete(record, response, redact)
            return response

        # Read by neocloud.api.schema to document the header.
        wrapper.idempotent = True  # type: ignore[attr-defined]
        return cast(View, wrapper)

    return decorate


def _fingerprint(request: Request) -> str:
    """Keyed by the server's secret: a body may hold a credential (a project secret's value),
    and a plain hash of it, kept for the replay window, could be guessed at offline."""
    body = json.dumps(request.data, sort_keys=True, default=str)
    message = f"{request.method} {request.path}\n{body}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def _claim(owner: str, key: str, fingerprint: str) -> tuple[IdempotencyRecord, bool]:
    """Insert the record in its own committed transaction: whoever inserts first owns the key."""
    with transaction.atomic():
        IdempotencyRecord.objects.filter(
            owner=owner, key=key, created_at__lt=timezone.now() - TTL
        ).delete()
    try:
        with transaction.atomic():
            return (
                IdempotencyRecord.objects.create(owner=owner, key=key, fingerprint=fingerprint),
                True,
            )
    except IntegrityError:
        return IdempotencyRecord.objects.get(owner=owner, key=key), False


def _replay(record: IdempotencyRecord, fingerprint: str) -> Response:
    if record.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"this {HEADER} was used with a different request", fields={HEADER: ["reused"]}
        )
    deadline = time.monotonic() + WAIT_FOR_FIRST_S
    while record.completed_at is None:
        if time.monotonic() > deadline:
            raise IdempotencyInProgress("the first request with this key is still running")
        time.sleep(0.05)
        fresh = IdempotencyRecord.objects.filter(pk=record.pk).first()
        if fresh is None:  # the first request failed and released the key
            raise IdempotencyInProgress("the first request with this key failed; retry")
        record = fresh
    response = Response(record.body, status=record.status_code)
    response["Idempotent-Replayed"] = "true"
    return response


def _complete(record: IdempotencyRecord, response: Response, redact: Collection[str]) -> None:
    body = response.data
    if redact and isinstance(body, dict):
        body = {k: (None if k in redact else v) for k, v in body.items()}
    IdempotencyRecord.objects.filter(pk=record.pk).update(
        status_code=response.status_code,
        body=json.loads(json.dumps(body, default=str)),
        completed_at=timezone.now(),
    )


def _release(record: IdempotencyRecord) -> None:
    IdempotencyRecord.objects.filter(pk=record.pk).delete()


def idempotency_purge() -> int:
    """Delete expired records (beat task); expiry is also checked lazily on every claim."""
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=timezone.now() - TTL).delete()
    return deleted
