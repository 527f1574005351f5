"""What other apps learn from scheduling without the scheduler importing them: apps that
depend on the scheduler (orders, billing) register here when they load."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from scheduler.models import Workload

WorkloadEnded = Callable[[Workload], None]
_workload_ended: list[WorkloadEnded] = []


def on_workload_ended(hook: WorkloadEnded) -> None:
    """Call ``hook`` with each workload that reaches a final status, after that commits (in
    a transaction of its own: it may lock its rows before the log's lock)."""
    if hook not in _workload_ended:
        _workload_ended.append(hook)


def workload_ended(workload: Workload) -> None:
    def notify() -> None:
        for hook in _workload_ended:
            hook(workload)

    transaction.on_commit(notify)
