"""Operators' admin for the fleet: browse topology and nodes, and drive the lifecycle. Writes
go through the services, so they are events like API writes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from inventory import services
from inventory.lifecycle import NodeAction
from inventory.models import Cluster, Gpu, GpuModel, Node, ProvisioningStep, Rack, Region
from neocloud.errors import ApplicationError
from neocloud.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.models import User


class ReadOnly(admin.ModelAdmin):  # type: ignore[type-arg]
    """Fleet rows are projections: defined by ``import_fleet`` or the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(GpuModel)
class GpuModelAdmin(ReadOnly):
    list_display = ("slug", "name", "vendor", "memory_gib", "interconnect", "shareable")
    list_filter = ("vendor", "interconnect", "shareable")
    search_fields = ("slug", "name")


@admin.register(Region)
class RegionAdmin(ReadOnly):
    list_display = ("slug", "name")


class RackInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Rack
    extra = 0
    fields = ("name", "leaf_switch", "spine")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(ReadOnly):
    list_display = ("slug", "name", "region", "created_at")
    list_filter = ("region",)
    search_fields = ("slug", "name")
    inlines = [RackInline]


class GpuInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Gpu
    extra = 0
    fields = ("index", "uuid", "nvlink_domain", "healthy", "fault")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StepInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ProvisioningStep
    extra = 0
    fields = ("run", "phase", "step", "status", "attempts", "last_error", "updated_at")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _lifecycle_action(action: NodeAction, description: str) -> Any:
    def run(model_admin: NodeAdmin, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        actor = Actor(user=request.user if isinstance(request.user, User) else None)
        done = 0
        for node in queryset:
            try:
                if action is NodeAction.PROVISION:
                    atomic_with_retry(services.node_provision, actor=actor, node=node)
                elif action is NodeAction.DECOMMISSION:
                    atomic_with_retry(
                        services.node_decommission,
                        actor=actor,
                        node=node,
                        reason=f"by {request.user}",
                    )
                else:
                    atomic_with_retry(
                        services.node_transition,
                        actor=actor,
                        node=node,
                        action=action,
                        reason=f"by {request.user}",
                    )
                done += 1
            except ApplicationError as exc:
                messages.error(request, f"{node.name}: {exc.code}: {exc.message}")
        if done:
            messages.success(request, f"{action.value}: {done} node(s)")

    run.__name__ = action.value
    return admin.action(description=description)(run)


@admin.register(Node)
class NodeAdmin(ReadOnly):
    list_display = (
        "name",
        "cluster",
        "rack",
        "gpu_model",
        "state",
        "state_changed_at",
        "last_heartbeat_at",
    )
    list_filter = ("state", "cluster", "gpu_model", "rack")
    search_fields = ("name", "gpus__uuid")
    inlines = [GpuInline, StepInline]
    exclude = ("token_hash",)
    actions = [
        _lifecycle_action(NodeAction.PROVISION, "Provision"),
        _lifecycle_action(NodeAction.CORDON, "Cordon (no new placements)"),
        _lifecycle_action(NodeAction.UNCORDON, "Uncordon"),
        _lifecycle_action(NodeAction.DRAIN, "Drain (then maintenance)"),
        _lifecycle_action(NodeAction.MAINTENANCE, "End drain: maintenance now"),
        _lifecycle_action(NodeAction.DECOMMISSION, "Decommission"),
    ]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The change list must allow actions; the form itself stays read-only.
        return obj is None and bool(request.user.is_staff)
