"""The catalog tables, kept from the offering streams inside each append."""

from __future__ import annotations

from collections.abc import Iterable

from catalog import events as ev
from catalog.models import Offering, OfferingGpuModel, PricePlan, StoragePrice
from events import projections
from events.projections import handles
from events.store import RecordedEvent


class Catalog(projections.Projection):
    name = "catalog.catalog"
    models = (Offering, OfferingGpuModel, PricePlan, StoragePrice)

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        heads: dict[str, RecordedEvent] = {}
        for event in events:
            self.apply(event)
            if event.stream_type == ev.OFFERING_STREAM:
                heads[event.stream_id] = event
        # The stream's version: what the next write to the offering must expect.
        for slug, last in heads.items():
            Offering.objects.filter(slug=slug).update(
                version=last.version, updated_at=last.recorded_at
            )

    @handles(ev.OfferingDefined)
    def offering_defined(self, event: RecordedEvent) -> None:
        definition = dict(event.data)
        slug = definition.pop("slug")
        Offering.objects.update_or_create(
            slug=slug,
            defaults=definition,
            create_defaults={
                **definition,
                "active": True,
                "version": event.version,
                "created_at": event.recorded_at,
                "updated_at": event.recorded_at,
            },
        )
        OfferingGpuModel.objects.filter(offering_id=slug).delete()
        OfferingGpuModel.objects.bulk_create(
            OfferingGpuModel(offering_id=slug, gpu_model=model, preference=rank)
            for rank, model in enumerate(definition["gpu_models"])
        )

    @handles(ev.OfferingRetired)
    def offering_retired(self, event: RecordedEvent) -> None:
        Offering.objects.filter(slug=event.stream_id).update(active=False)

    @handles(ev.OfferingReactivated)
    def offering_reactivated(self, event: RecordedEvent) -> None:
        Offering.objects.filter(slug=event.stream_id).update(active=True)

    @handles(ev.PricePlanSet)
    def price_plan_set(self, event: RecordedEvent) -> None:
        data = event.data
        PricePlan.objects.update_or_create(
            id=data["price_plan_id"],
            defaults={
                "offering_id": event.stream_id,
                "region": data["region"],
                "plan": data["plan"],
                "price_per_gpu_hour_minor": data["price_per_gpu_hour_minor"],
                "currency": data["currency"],
                "updated_at": event.recorded_at,
            },
        )

    @handles(ev.PricePlanRemoved)
    def price_plan_removed(self, event: RecordedEvent) -> None:
        PricePlan.objects.filter(id=event.data["price_plan_id"]).delete()

    @handles(ev.StoragePriceSet)
    def storage_price_set(self, event: RecordedEvent) -> None:
        data = event.data
        StoragePrice.objects.update_or_create(
            volume_type=data["volume_type"],
            defaults={
                "price_per_gb_hour_minor": data["price_per_gb_hour_minor"],
                "currency": data["currency"],
                "updated_at": event.recorded_at,
            },
        )


projections.register(Catalog(), synchronous=True)
