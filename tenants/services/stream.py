"""Writing an organization's stream, which every tenancy write but a user's goes to.

Lock order: the organization's row (``organization_locked``), then the log's append lock
(taken by ``store.append``), never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence

from events import store
from events.types import DomainEvent
from neocloud.core.transactions import row_lock
from tenants import events as ev
from tenants.access import Actor
from tenants.models import Organization


def organization_locked(organization: Organization) -> Organization:
    """The organization as it is now, locked until the transaction ends.

    Writers of one organization queue on its row instead of failing each other's expected
    version; the version check stays as the guarantee.
    """
    return row_lock(Organization.objects.all()).get(pk=organization.pk)


def organization_append(
    actor: Actor, organization: Organization, events: Sequence[DomainEvent]
) -> None:
    """Append with the version read: a concurrent change makes it fail (``StreamConflict``)."""
    store.append(
        ev.ORGANIZATION_STREAM,
        str(organization.id),
        events,
        expected_version=organization.version,
        metadata=actor.metadata(organization.id),
    )
