"""Volumes on the invoice: provisioned GB-hours metered from the volume events, at the
catalog's storage price, beside GPU usage; a replay of the catalog keeps the price."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.management import call_command

from billing import services
from billing.models import Invoice
from catalog.models import StoragePrice
from catalog.storage_prices import storage_price_set
from storage import services as storage
from storage.models import Volume
from tests.billing.conftest import History
from tests.builders import SYSTEM, run
from tests.builders import commerce as commerce_builders
from tests.builders.history import clock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

JAN = services.Period.parse("2025-01")


def at(day: int, hour: int = 0) -> datetime:
    return datetime(2025, 1, day, hour, tzinfo=UTC)


@pytest.fixture
def shared(shop: commerce_builders.Shop, settings: Any) -> commerce_builders.Shop:
    settings.VOLUME_SHARED_PATHS = {shop.cluster.slug: "/srv/neocloud-shared"}
    return shop


def _volume(customer: commerce_builders.Customer, cluster: str, name: str, gb: int) -> Volume:
    volume: Volume = run(
        storage.volume_create,
        project=customer.project,
        name=name,
        size_gb=gb,
        cluster=cluster,
        type="shared",
    )
    return volume


def test_a_volume_kept_ten_hours_of_100_gb_is_1000_gb_hours_on_the_invoice(
    customer: commerce_builders.Customer, shared: commerce_builders.Shop, history: History
) -> None:
    # given a price of 2 cents a GB-hour, a 100 GB volume kept 10 hours, and 2 GPU-hours
    run(storage_price_set, volume_type="shared", price_per_gb_hour_minor=2, currency="USD")
    with clock(at(10, 8)):
        volume = _volume(customer, shared.cluster.slug, "checkpoints", 100)
    with clock(at(10, 18)):
        run(storage.volume_delete, volume=volume)
    history.run(at(10, 10), at(10, 12))

    # when January is closed
    services.period_close(actor=SYSTEM, period=JAN)

    # then the volume is a line of its own: 1000 GB-hours at 2 = 2000, beside the GPUs' 500
    invoice = Invoice.objects.get(organization=customer.organization, period="2025-01")
    lines = {line.kind: line for line in invoice.lines.all()}
    assert set(lines) == {"usage", "storage"}
    line = lines["storage"]
    assert line.description == "volume checkpoints (shared, 100 GB), 1000.0000 GB-hours"
    assert (line.amount_minor, line.unit_price_minor, line.source) == (
        2000,
        2,
        f"volume/{volume.pk}",
    )
    assert line.project_id == customer.project.pk
    assert invoice.subtotal_minor == 2000 + lines["usage"].amount_minor


def test_a_volume_still_kept_is_billed_to_the_end_of_the_month_and_clipped_at_its_start(
    customer: commerce_builders.Customer, shared: commerce_builders.Shop
) -> None:
    run(storage_price_set, volume_type="shared", price_per_gb_hour_minor=1, currency="USD")
    with clock(datetime(2024, 12, 31, 23, tzinfo=UTC)):
        _volume(customer, shared.cluster.slug, "kept", 10)

    services.period_close(actor=SYSTEM, period=JAN)

    line = Invoice.objects.get(organization=customer.organization).lines.get(kind="storage")
    hours = 31 * 24
    assert line.amount_minor == 10 * hours  # January's hours only, not December's last


def test_an_unpriced_volume_type_is_not_billed_and_a_price_replays(
    customer: commerce_builders.Customer, shared: commerce_builders.Shop
) -> None:
    with clock(at(2)):
        _volume(customer, shared.cluster.slug, "free", 10)
    services.period_close(actor=SYSTEM, period=JAN)
    assert not Invoice.objects.filter(organization=customer.organization).exists()

    run(storage_price_set, volume_type="local", price_per_gb_hour_minor=3, currency="EUR")
    live = list(StoragePrice.objects.values_list())
    call_command("replay", "catalog.catalog", verbosity=0)
    assert list(StoragePrice.objects.values_list()) == live
