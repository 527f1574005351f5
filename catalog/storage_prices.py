"""Storage prices: what a GB-hour of a volume type's provisioned size costs (issue 32). Set
by operators like GPU prices; the invoice rates the volumes' GB-hours at them."""

from __future__ import annotations

from catalog import events as ev
from catalog.errors import OfferingInvalid
from catalog.models import StoragePrice
from catalog.services import CURRENCY
from events import store
from events.store import ANY
from storage.models import VolumeType
from tenants.access import Action, Actor

MAX_PRICE_PER_GB_HOUR_MINOR = 1_000_000


def storage_price_set(
    *, actor: Actor, volume_type: str, price_per_gb_hour_minor: int, currency: str
) -> StoragePrice:
    """Set (create or replace) the price of a GB-hour of ``volume_type``. The stream's version
    is not read: the last price set wins, and each is recorded."""
    actor.require(Action.CATALOG_WRITE)
    problems: dict[str, list[str]] = {}
    if volume_type not in VolumeType.values:
        problems["volume_type"] = ["local or shared"]
    if not CURRENCY.match(currency):
        problems["currency"] = ["an ISO 4217 code such as USD"]
    if not 0 <= price_per_gb_hour_minor <= MAX_PRICE_PER_GB_HOUR_MINOR:
        problems["price_per_gb_hour_minor"] = [f"0 to {MAX_PRICE_PER_GB_HOUR_MINOR}"]
    if problems:
        raise OfferingInvalid("storage price is not valid", fields=problems)
    store.append(
        ev.STORAGE_PRICE_STREAM,
        volume_type,
        [
            ev.StoragePriceSet(
                volume_type=volume_type,
                price_per_gb_hour_minor=price_per_gb_hour_minor,
                currency=currency,
            )
        ],
        expected_version=ANY,
        metadata=actor.metadata(),
    )
    return StoragePrice.objects.get(pk=volume_type)
