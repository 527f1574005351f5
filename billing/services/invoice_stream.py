"""An issued invoice's stream, which corrections, collection and webhooks change.

Concurrency: every change locks the ``Invoice`` row (``locked``), then appends (the log's
lock) at the version it read (``append``): two changes of one invoice run one after the other,
and one that read a stale row conflicts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from billing import events as ev
from billing.models import Invoice
from events import store
from events.types import DomainEvent
from neocloud.core.transactions import row_lock
from tenants.access import Actor


def locked(invoice_id: uuid.UUID) -> Invoice:
    return row_lock(Invoice.objects.all()).get(pk=invoice_id)


def append(actor: Actor, invoice: Invoice, events: Sequence[DomainEvent]) -> None:
    store.append(
        ev.INVOICE_STREAM,
        str(invoice.pk),
        events,
        expected_version=invoice.version,
        metadata=actor.metadata(invoice.organization_id),
    )
