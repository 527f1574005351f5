"""Operators' admin for scheduling: priority classes and queues (cohorts, borrowing) are set
here through the services; workloads, allocations and reservations are browsed, and
workloads can be cancelled. Every write is an event like an API write."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduler import selectors, services
from scheduler.models import (
    Allocation,
    PriorityClass,
    Queue,
    Reservation,
    SchedulerLease,
    Workload,
    WorkloadWait,
)
from tenants.service_admin import ReadOnlyServiceAdmin, ServiceAdmin


@admin.register(PriorityClass)
class PriorityClassAdmin(ServiceAdmin):
    list_display = ("name", "value", "preemptible", "description")
    fields = ("name", "value", "preemptible", "description")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else ("name",)

    def save_model(self, request: HttpRequest, obj: PriorityClass, form: Any, change: bool) -> None:
        self.run(
            request,
            services.priority_class_define,
            name=obj.name,
            value=obj.value,
            preemptible=obj.preemptible,
            description=obj.description,
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # workloads refer to classes by name


@admin.register(Queue)
class QueueAdmin(ServiceAdmin):
    """A project's queue: its cohort and borrowing terms (its quota is set on the project)."""

    list_display = (
        "project",
        "organization",
        "cohort",
        "borrowing_limit",
        "lending_limit",
        "weight",
    )
    list_filter = ("cohort",)
    fields = ("project", "cohort", "borrowing_limit", "lending_limit", "weight")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else ("project",)

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        self.run(
            request,
            services.queue_configure,
            project=obj.project,
            cohort=obj.cohort,
            borrowing_limit=obj.borrowing_limit,
            lending_limit=obj.lending_limit,
            weight=obj.weight,
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyServiceAdmin):
    list_display = (
        "name",
        "organization",
        "project",
        "status",
        "gpus_per_node",
        "nodes",
        "priority_class",
        "submitted_at",
    )
    list_filter = ("status", "kind", "priority_class")
    search_fields = ("name", "id")
    actions = ["cancel"]
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "name",
                    "organization",
                    "project",
                    "cluster_id",
                    "kind",
                    "status",
                    "status_reason",
                    "allocation_id",
                    "utilisation",
                )
            },
        ),
        (
            "Request",
            {
                "fields": (
                    "gpu_models",
                    "gpus_per_node",
                    "nodes",
                    "min_nodes",
                    "gpu_milli",
                    "cpu_milli",
                    "memory_mib",
                    "priority_class",
                    "priority",
                    "preemptible",
                    "topology",
                    "runtime_estimate_s",
                    "max_runtime_s",
                    "retry_limit",
                    "restart_policy",
                    "reservation_id",
                    "price_plan",
                    "offering",
                    "order_id",
                )
            },
        ),
        # Secrets by name: their values are in no row of this table.
        ("Program", {"fields": ("command", "image", "env", "secrets", "working_dir", "ports")}),
        (
            "Runs",
            {
                "fields": (
                    "endpoints",
                    "runs",
                    "failures",
                    "preemptions",
                    "cancel_requested",
                    "submitted_at",
                    "started_at",
                    "finished_at",
                )
            },
        ),
    )
    readonly_fields = ("utilisation",)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None  # the list's actions; no edit form

    @admin.display(description="GPU utilisation")
    def utilisation(self, workload: Workload) -> str:
        """Allocation is not utilisation: what the run's GPUs last reported."""
        held = [workload.allocation_id] if workload.allocation_id else []
        allocations = {a.pk: a for a in Allocation.objects.filter(pk__in=held)}
        used = selectors.workloads_utilisation([workload], allocations).get(workload.pk)
        if used is None:
            return "-"
        mean = "n/a" if used.utilization_pct is None else f"{used.utilization_pct:.1f}%"
        idle = f", idle since {used.idle_since:%Y-%m-%d %H:%M}" if used.idle else ""
        return (
            f"{used.gpus} GPUs, {mean} mean, {used.memory_used_mib} MiB used{idle}"
            f" (as of {used.telemetry_at:%Y-%m-%d %H:%M:%S})"
        )

    @admin.action(description="Cancel (releases their GPUs)")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        self.run_each(
            request,
            services.workload_cancel,
            queryset,
            "workload",
            reason=f"cancelled by operator {request.user}",
        )


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyServiceAdmin):
    list_display = ("id", "workload", "gpu_model", "gpu_milli", "granted_at", "released_at")
    list_filter = ("gpu_model", "release_reason")


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyServiceAdmin):
    list_display = ("id", "organization", "project", "gpu_model", "gpus", "starts_at", "ends_at")
    list_filter = ("status", "gpu_model")


@admin.register(SchedulerLease)
class SchedulerLeaseAdmin(ReadOnlyServiceAdmin):
    list_display = ("cluster_id", "holder", "term", "expires_at")


@admin.register(WorkloadWait)
class WorkloadWaitAdmin(ReadOnlyServiceAdmin):
    list_display = ("workload_id", "code", "message", "updated_at")
    list_filter = ("code",)
