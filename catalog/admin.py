"""Operators' admin for the catalog. Saves and actions go through the services, so every
change is an event like any other write."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from catalog import services
from catalog.models import Offering, PricePlan
from tenants.service_admin import ServiceAdmin


class OfferingForm(forms.ModelForm):  # type: ignore[type-arg]
    gpu_models = forms.CharField(
        help_text="GPU model slugs, comma-separated, preferred first (e.g. h100-sxm, a100)."
    )

    class Meta:
        model = Offering
        fields = list(services.DEFINITION_FIELDS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["gpu_models"] = ", ".join(self.instance.gpu_models)

    def clean_gpu_models(self) -> list[str]:
        return [m.strip() for m in self.cleaned_data["gpu_models"].split(",") if m.strip()]


@admin.register(Offering)
class OfferingAdmin(ServiceAdmin):
    form = OfferingForm
    list_display = ("slug", "name", "kind", "gpus_per_node", "max_nodes", "active")
    list_filter = ("kind", "active")
    search_fields = ("slug", "name")
    actions = ["retire", "reactivate"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else ("slug", "active", "version", "prices")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(services.DEFINITION_FIELDS)
        return fields if obj is None else [*fields, "active", "version", "prices"]

    @admin.display(description="Price plans (set them on the price plan page)")
    def prices(self, obj: Offering) -> str:
        return "; ".join(
            f"{p.region} {p.plan}: {p.price_per_gpu_hour_minor} {p.currency} minor/GPU-hour"
            for p in obj.price_plans.all()
        )

    def save_model(self, request: HttpRequest, obj: Offering, form: Any, change: bool) -> None:
        definition = {name: form.cleaned_data.get(name) for name in services.DEFINITION_FIELDS}
        definition["slug"] = obj.slug
        definition["description"] = definition["description"] or ""
        saved = self.run(request, services.offering_define, **definition)
        obj.pk = saved.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # retire instead: orders refer to offerings

    @admin.action(description="Retire (no new orders)")
    def retire(self, request: HttpRequest, queryset: QuerySet[Offering]) -> None:
        self.run_each(
            request,
            services.offering_retire,
            queryset,
            "offering",
            reason=f"retired by operator {request.user}",
        )

    @admin.action(description="Reactivate")
    def reactivate(self, request: HttpRequest, queryset: QuerySet[Offering]) -> None:
        self.run_each(request, services.offering_reactivate, queryset, "offering")


@admin.register(PricePlan)
class PricePlanAdmin(ServiceAdmin):
    list_display = ("offering", "region", "plan", "price_per_gpu_hour_minor", "currency")
    list_filter = ("plan", "region", "currency")
    search_fields = ("offering__slug", "region")
    fields = ("offering", "region", "plan", "price_per_gpu_hour_minor", "currency")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else ("offering", "region", "plan")

    def save_model(self, request: HttpRequest, obj: PricePlan, form: Any, change: bool) -> None:
        saved = self.run(
            request,
            services.price_plan_set,
            offering=obj.offering,
            region=obj.region,
            plan=obj.plan,
            price_per_gpu_hour_minor=obj.price_per_gpu_hour_minor,
            currency=obj.currency,
        )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: PricePlan) -> None:
        self.run(request, services.price_plan_remove, price_plan=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[PricePlan]) -> None:
        self.run_each(request, services.price_plan_remove, queryset, "price_plan")
