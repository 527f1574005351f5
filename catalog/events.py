"""Catalog events, in the stream ``offering/<slug>``: the offering and its price plans are one
aggregate, so one expected version guards both."""

from __future__ import annotations

from uuid import UUID

from events.types import DomainEvent, event_type

OFFERING_STREAM = "offering"


@event_type("catalog.OfferingDefined")
class OfferingDefined(DomainEvent):
    """The whole definition, each time it changes (defining again the same is no event)."""

    slug: str
    name: str
    description: str
    kind: str
    gpu_models: list[str]
    gpus_per_node: int
    max_nodes: int
    gang: bool
    gpu_milli: int
    topology: str
    max_runtime_s: int | None
    max_gpus: int | None
    max_duration_s: int | None
    # What a workload against it runs where its request says nothing ("" and empty: nothing);
    # definitions recorded before offerings carried these have none.
    image: str = ""
    command: list[str] = []
    env: dict[str, str] = {}
    working_dir: str = ""
    ports: list[int] = []


@event_type("catalog.OfferingRetired")
class OfferingRetired(DomainEvent):
    """No new orders; what was ordered keeps running."""

    reason: str


@event_type("catalog.OfferingReactivated")
class OfferingReactivated(DomainEvent):
    pass


@event_type("catalog.PricePlanSet")
class PricePlanSet(DomainEvent):
    price_plan_id: UUID
    region: str
    plan: str
    price_per_gpu_hour_minor: int
    currency: str


@event_type("catalog.PricePlanRemoved")
class PricePlanRemoved(DomainEvent):
    price_plan_id: UUID


# --- Storage prices (issue 32): the stream ``storage_price/<volume type>`` ---
STORAGE_PRICE_STREAM = "storage_price"


@event_type("catalog.StoragePriceSet")
class StoragePriceSet(DomainEvent):
    """What a GB-hour of a volume type's provisioned size costs, from now on."""

    volume_type: str
    price_per_gb_hour_minor: int
    currency: str
