"""Tenancy reads that decide what a caller is shown."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from events.models import Event
from neocloud.core.redaction import redact
from tenants.access import Action, Actor
from tenants.models import Organization


def audit_feed(*, actor: Actor, organization: Organization) -> QuerySet[Event]:
    """Every event recorded for the organization, for those who may read its audit feed."""
    actor.require(Action.AUDIT_READ, organization)
    return Event.objects.filter(organization_id=organization.pk)


def audit_data(event: Event) -> dict[str, Any]:
    """What a feed shows of an event's data: everything a tenant's admin may see, never a
    credential or its hash (``key_hash``, ``token_hash``, a driver's secrets). Every feed of
    events renders their data through here."""
    shown: dict[str, Any] = redact(event.data)
    return shown
