"""Operators' admin for billing: settings (tax rates, default GPU prices, SLAs) are plain
tables; invoices and accounts are read-only projections, changed through services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from billing import services
from billing.models import (
    BillingAccount,
    CreditGrant,
    DefaultGpuPrice,
    Invoice,
    InvoiceLine,
    SlaDefinition,
    TaxRate,
)
from tenants.service_admin import ServiceAdmin, admin_actor


@admin.register(TaxRate)
class TaxRateAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("country", "rate_percent")


@admin.register(DefaultGpuPrice)
class DefaultGpuPriceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("gpu_model", "price_plan", "price_per_gpu_hour_minor", "currency")


@admin.register(SlaDefinition)
class SlaDefinitionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "offering",
        "availability_percent",
        "availability_credit_percent",
        "max_provisioning_s",
    )


class ReadOnly(ServiceAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LineInline(admin.TabularInline):  # type: ignore[type-arg]
    model = InvoiceLine
    extra = 0
    can_delete = False
    fields = ("position", "kind", "description", "amount_minor", "source")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Invoice)
class InvoiceAdmin(ReadOnly):
    list_display = (
        "number",
        "organization",
        "period",
        "status",
        "total_minor",
        "currency",
        "payment_failures",
    )
    list_filter = ("status", "period", "currency")
    search_fields = ("number", "organization__slug")
    inlines = [LineInline]
    actions = ["void", "mark_uncollectible", "collect"]

    @admin.action(description="Void (nothing paid; credits come back)")
    def void(self, request: HttpRequest, queryset: QuerySet[Invoice]) -> None:
        self.run_each(
            request, services.invoice_void, queryset, "invoice", reason="voided by an operator"
        )

    @admin.action(description="Mark uncollectible")
    def mark_uncollectible(self, request: HttpRequest, queryset: QuerySet[Invoice]) -> None:
        self.run_each(
            request,
            services.invoice_mark_uncollectible,
            queryset,
            "invoice",
            reason="written off by an operator",
        )

    @admin.action(description="Collect now (charge the card on file)")
    def collect(self, request: HttpRequest, queryset: QuerySet[Invoice]) -> None:
        # Not through ``run``: collection calls Stripe outside any transaction.
        for invoice in queryset:
            services.invoice_collect(actor=admin_actor(request), invoice=invoice)


@admin.register(BillingAccount)
class BillingAccountAdmin(ReadOnly):
    list_display = (
        "organization",
        "billing_country",
        "currency",
        "minimum_commitment_minor",
        "payment_method_last4",
    )


@admin.register(CreditGrant)
class CreditGrantAdmin(ReadOnly):
    list_display = (
        "organization",
        "kind",
        "amount_minor",
        "remaining_minor",
        "currency",
        "granted_at",
    )
    list_filter = ("kind",)
