from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """Queues, workloads, reservations and the scheduling service around the pure engine."""

    name = "scheduler"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        from inventory import hooks as inventory
        from scheduler import runs, tasks, triggers

        inventory.node_has_work.register(runs.node_has_allocations)
        inventory.node_failed.register(runs.node_failed)
        triggers.cycle_dispatch.register(tasks.cycle_dispatch)
        triggers.runs_start_dispatch.register(tasks.runs_start_dispatch)
        triggers.run_stop_dispatch.register(tasks.run_stop_dispatch)
        triggers.runs_notice_dispatch.register(tasks.runs_notice_dispatch)
        # Volumes (issue 32): one is deleted only when no workload mounts it.
        from scheduler.selectors.volumes import workload_mounting
        from storage import hooks as storage

        storage.volume_in_use.register(workload_mounting)
