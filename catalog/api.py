"""Catalog endpoints: every signed-in caller lists what can be ordered, with prices and what
the fleet could start now. Operators change the catalog in the admin."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from rest_framework import viewsets

from catalog import selectors
from catalog import serializers as s
from catalog.models import Offering, OfferingKind
from neocloud.api.pagination import Cursor
from neocloud.api.queries import KnownParameters
from tenants.actor import actor_for


class BySlug(Cursor):
    ordering = "slug"


class OfferingFilter(django_filters.FilterSet):  # type: ignore[misc]
    kind = django_filters.ChoiceFilter(choices=OfferingKind.choices)
    gpu_model = django_filters.CharFilter(method="with_gpu_model", help_text="GPU model slug")
    region = django_filters.CharFilter(
        method="in_region", help_text="Only offerings priced in this region (and its prices)."
    )
    active = django_filters.BooleanFilter()

    class Meta:
        model = Offering
        fields = ["kind", "gpu_model", "region", "active"]

    def with_gpu_model(self, queryset: QuerySet[Offering], name: str, value: str) -> Any:
        return queryset.filter(
            slug__in=selectors.offerings_with_gpu_model(value).values("offering_id")
        )

    def in_region(self, queryset: QuerySet[Offering], name: str, value: str) -> Any:
        return queryset.filter(price_plans__region=value).distinct()


class OfferingViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Offerings with their price plans and availability per region (free schedulable GPUs
    of the offering's models, and how many of its units fit now)."""

    queryset = Offering.objects.all()
    serializer_class = s.OfferingSerializer
    pagination_class = BySlug
    filter_backends = [KnownParameters]
    filterset_class = OfferingFilter

    def get_queryset(self) -> QuerySet[Offering]:
        return selectors.offering_list(actor=actor_for(self.request))

    def get_serializer_context(self) -> dict[str, Any]:
        region = self.request.query_params.get("region") or None
        return {
            **super().get_serializer_context(),
            "region": region,
            "free": selectors.FreeGpus.now(regions=[region] if region else None),
        }
