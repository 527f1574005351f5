from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """For now the engine's commands (``simulate``) and benchmark; queues, workloads and the
    scheduling service join with the order-to-running issue."""

    name = "scheduler"
    verbose_name = "Scheduler"
