"""Reads of the log for its feeds. The log knows no tenant: callers decide who may see what
and pass it as plain values (an organization's id), so this imports no app."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import QuerySet

from events.models import Event
from neocloud.core.redaction import redact


def organization_events(*, organization_id: UUID) -> QuerySet[Event]:
    """Every event recorded for an organization: an index scan of the organization's id,
    copied out of each event's metadata at append."""
    return Event.objects.filter(organization_id=organization_id)


def audit_data(event: Event) -> dict[str, Any]:
    """What a feed shows of an event's data: everything a tenant's admin may see, never a
    credential or its hash (``key_hash``, ``token_hash``, a driver's secrets). Every feed of
    events renders their data through here."""
    shown: dict[str, Any] = redact(event.data)
    return shown
