"""Operators' admin for the fleet: browse topology and nodes, and drive the lifecycle. Writes
go through the services, so they are events like API writes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from inventory import services
from inventory.lifecycle import NodeAction
from inventory.models import Cluster, Gpu, GpuModel, Node, ProvisioningStep, Rack, Region
from tenants.service_admin import ReadOnlyServiceAdmin


@admin.register(GpuModel)
class GpuModelAdmin(ReadOnlyServiceAdmin):
    list_display = ("slug", "name", "vendor", "memory_gib", "interconnect", "shareable")
    list_filter = ("vendor", "interconnect", "shareable")
    search_fields = ("slug", "name")


@admin.register(Region)
class RegionAdmin(ReadOnlyServiceAdmin):
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
class ClusterAdmin(ReadOnlyServiceAdmin):
    list_display = ("slug", "name", "region", "created_at")
    list_filter = ("region",)
    search_fields = ("slug", "name")
    inlines = [RackInline]


class GpuInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Gpu
    extra = 0
    fields = (
        "index",
        "uuid",
        "nvlink_domain",
        "healthy",
        "fault",
        "utilization_pct",
        "memory_used_mib",
        "idle_since",
        "telemetry_at",
    )
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
        reason = f"by {request.user}"
        if action is NodeAction.PROVISION:
            model_admin.run_each(request, services.node_provision, queryset, "node")
        elif action is NodeAction.DECOMMISSION:
            model_admin.run_each(
                request, services.node_decommission, queryset, "node", reason=reason
            )
        else:
            model_admin.run_each(
                request, services.node_transition, queryset, "node", action=action, reason=reason
            )

    run.__name__ = action.value
    return admin.action(description=description)(run)


@admin.register(Node)
class NodeAdmin(ReadOnlyServiceAdmin):
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
    exclude = ("token_hash", "agent_info")
    readonly_fields = ("agent",)
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

    @admin.display(description="Node agent")
    def agent(self, node: Node) -> str:
        """What the agent last said of itself (telemetry, not events)."""
        info = node.agent_info
        if not info:
            return "no full report yet"
        gpus = "fake GPUs" if info.get("fake_gpus") else "real GPUs"
        cgroups = "cgroups" if info.get("cgroups") else f"no cgroups ({info.get('cgroups_note')})"
        return (
            f"{info.get('version')} · {info.get('runtime')} · {gpus} · {cgroups}"
            f" · at {info.get('address') or '-'}"
        )
