"""Catalog reads: what customers see, and how much of an offering the fleet could start now."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import QuerySet

from catalog.models import Offering, OfferingGpuModel, OfferingKind, PricePlan
from inventory.models import Cluster
from inventory.selectors import cluster_capacity
from scheduler.selectors import gpus_held
from tenants.access import Actor

WHOLE = 1000


def offering_list(*, actor: Actor) -> QuerySet[Offering]:
    """Operators see every offering; customers the active ones."""
    offerings = Offering.objects.prefetch_related("price_plans")
    return offerings if actor.is_staff else offerings.filter(active=True)


def offerings_with_gpu_model(gpu_model: str) -> QuerySet[OfferingGpuModel]:
    return OfferingGpuModel.objects.filter(gpu_model=gpu_model)


def price_plan_find(*, offering: Offering, region: str, plan: str) -> PricePlan | None:
    return PricePlan.objects.filter(offering=offering, region=region, plan=plan).first()


@dataclass
class FreeGpus:
    """Free schedulable GPUs per region, GPU model and node, read once per request."""

    by_region: dict[str, dict[str, list[int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )

    @classmethod
    def now(cls, regions: Iterable[str] | None = None) -> FreeGpus:
        """Schedulable GPUs (healthy, on ready nodes) from the fleet's capacity view, less
        those the scheduler has allocated (a GPU holding any share counts as taken)."""
        free = cls()
        clusters = Cluster.objects.all()
        if regions is not None:
            clusters = clusters.filter(region_id__in=list(regions))
        for cluster in clusters:
            taken = gpus_held(cluster.pk)
            for node in cluster_capacity(cluster)["nodes"]:
                if node["gpu_model"] and node["schedulable"]:
                    free.by_region[cluster.region_id][node["gpu_model"]].append(
                        max(node["schedulable"] - len(taken.get(node["id"], ())), 0)
                    )
        return free

    def availability(self, offering: Offering) -> list[dict[str, object]]:
        """Per region the offering is priced in: its models' free GPUs, and how many units
        of it fit now (an instance, a node of a training job, a replica, reservable GPUs)."""
        regions = sorted({plan.region for plan in offering.price_plans.all()})
        return [self._in_region(offering, region) for region in regions]

    def _in_region(self, offering: Offering, region: str) -> dict[str, object]:
        models = self.by_region.get(region, {})
        per_model = {m: sum(models.get(m, [])) for m in offering.gpu_models}
        if offering.kind == OfferingKind.RESERVED:
            units = sum(per_model.values())
        elif offering.gpu_milli < WHOLE:
            units = sum(per_model.values()) * (WHOLE // offering.gpu_milli)
        else:
            units = sum(
                free // offering.gpus_per_node
                for m in offering.gpu_models
                for free in models.get(m, [])
            )
        return {
            "region": region,
            "free_gpus": sum(per_model.values()),
            "gpu_models": [{"gpu_model": m, "free_gpus": n} for m, n in per_model.items()],
            "units_available": units,
        }
