from typing import Any

from django.apps import AppConfig

from monitoring import instruments


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        """Answer the apps' hooks with the process-local metrics, and follow Celery's tasks."""
        from celery import signals

        from billing import hooks as billing
        from inventory import hooks as inventory
        from scheduler import hooks as scheduler

        scheduler.cycle_finished.register(instruments.cycle_finished)
        scheduler.start_estimate_checked.register(instruments.start_estimate_checked)
        inventory.provisioning_step_finished.register(instruments.provisioning_step_finished)
        billing.stripe_called.register(instruments.stripe_called)
        billing.webhook_received.register(instruments.webhook_received)
        signals.task_success.connect(_task_outcome("succeeded"), weak=False)
        signals.task_failure.connect(_task_outcome("failed"), weak=False)
        signals.task_retry.connect(_task_outcome("retried"), weak=False)
        signals.task_revoked.connect(_task_outcome("revoked"), weak=False)


def _task_outcome(outcome: str) -> Any:
    """A receiver of one of Celery's signals: their sender is the task."""

    def receive(sender: Any = None, **_: Any) -> None:
        instruments.task_finished(str(getattr(sender, "name", None) or "unknown"), outcome)

    return receive
