from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """Queues, workloads, reservations and the scheduling service around the pure engine."""

    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from inventory import services as inventory
        from scheduler import runs

        inventory.allocation_hooks.register(
            has_allocations=runs.node_has_allocations, node_failed=runs.node_failed
        )
