"""Operators' admin for orders: browse them, approve or reject the ones waiting, and set the
approval threshold. Every write goes through the services, so it is an event."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from orders import selectors, services
from orders.models import ApprovalPolicy, Order, OrderStep
from tenants.service_admin import ReadOnlyServiceAdmin, ServiceAdmin


class OrderStepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = OrderStep
    extra = 0
    fields = ("status", "actor", "reason", "at")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Order)
class OrderAdmin(ReadOnlyServiceAdmin):
    list_display = (
        "id",
        "organization",
        "project",
        "offering",
        "region",
        "price_plan",
        "gpus",
        "status",
        "needs_approval",
        "created_at",
    )
    list_filter = ("status", "needs_approval", "offering", "region", "price_plan")
    search_fields = ("id", "organization__slug", "project__slug", "offering")
    inlines = [OrderStepInline]
    actions = ["approve", "reject"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The change list must allow actions; the form itself stays read-only.
        return obj is None and bool(request.user.is_staff)

    @admin.action(description="Approve (and fulfil)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        self.run_each(request, services.order_approve, queryset, "order")

    @admin.action(description="Reject")
    def reject(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        self.run_each(
            request,
            services.order_reject,
            queryset,
            "order",
            reason=f"rejected by operator {request.user}",
        )


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(ServiceAdmin):
    """One row: orders of more GPUs than the threshold wait for approval (default
    ``selectors.DEFAULT_APPROVAL_THRESHOLD_GPUS`` until an operator sets it)."""

    list_display = ("threshold_gpus", "updated_at")
    fields = ("threshold_gpus",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return selectors.approval_policy() is None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"threshold_gpus": selectors.approval_threshold()}

    def save_model(
        self, request: HttpRequest, obj: ApprovalPolicy, form: Any, change: bool
    ) -> None:
        saved = self.run(
            request, services.approval_threshold_set, threshold_gpus=obj.threshold_gpus
        )
        obj.pk = saved.pk
