"""Provisioning tasks: one step of a run per task, and the reconciler that beat runs.

``provision_step`` acknowledges its message only once it returns (``acks_late``). A pool
process lost mid-task has its message given back at once by the worker
(``reject_on_worker_lost``); a whole worker lost leaves it unacknowledged, and Redis hands it
out again after the broker's visibility timeout. Either way the step runs again, which its
idempotency key makes harmless. Its soft time limit
(``PROVISIONING_STEP_TIMEOUT_S``, default 60 s, read when the worker starts) interrupts a
hanging step as a retryable failure; the hard limit a little above it stops a step that
ignores the soft one (its run is then picked up by the reconciler).
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from celery import Task, shared_task
from celery.exceptions import Retry
from django.conf import settings

from inventory import provisioning, services
from neocloud.core.transactions import RACES
from tenants.access import Actor

# Whole seconds: Celery takes 0 for "no limit".
STEP_TIMEOUT_S = max(1, int(getattr(settings, "PROVISIONING_STEP_TIMEOUT_S", 60)))
# Room for the claim and record transactions around an interrupted driver call.
STEP_HARD_TIMEOUT_S = STEP_TIMEOUT_S + 15


@shared_task(
    bind=True,
    name="inventory.provision_step",
    acks_late=True,
    reject_on_worker_lost=True,
    # Attempts are counted in the node's stream (they survive a killed worker), not here.
    max_retries=None,
    soft_time_limit=STEP_TIMEOUT_S,
    time_limit=STEP_HARD_TIMEOUT_S,
    ignore_result=True,
)
def provision_step(self: Task[[str, int], str | Retry], node_id: str, run: int) -> str | Retry:
    """Advance provisioning run ``run`` of the node by one step; retry it with backoff."""
    try:
        outcome = provisioning.provisioning_step_run(node_id=UUID(node_id), run=run)
    except RACES:
        # Lost every attempt of a transaction to concurrent writers: the step runs again
        # (a claimed attempt counts; the driver's key makes a performed one harmless).
        outcome = provisioning.StepOutcome(provisioning.StepStatus.RETRYING, retry_in_s=1.0)
    if outcome.retry_in_s is None:
        return outcome.status.value
    if self.request.is_eager:
        # In process (the embedded default), a retry must be returned: Celery applies a
        # returned Retry again at once, while a raised one escapes to the caller under
        # task_eager_propagates. The countdown is not waited for there.
        return self.retry(countdown=outcome.retry_in_s, throw=False)
    raise self.retry(countdown=outcome.retry_in_s)


def provision_step_enqueue(node_id: UUID, run: int) -> None:
    """Answers ``inventory.hooks.provisioning_step_enqueue``."""
    provision_step.delay(str(node_id), run)


@shared_task(name="inventory.reconcile_provisioning", ignore_result=True)
def reconcile_provisioning() -> int:
    """Dispatch again the runs that made no progress for ``PROVISIONING_STALE_AFTER_S``."""
    return len(provisioning.provisioning_reconcile())


@shared_task(name="inventory.check_heartbeats", ignore_result=True)
def check_heartbeats() -> int:
    """Fail the nodes not heard from within ``HEARTBEAT_TIMEOUT_S``."""
    failed = services.heartbeats_check(
        actor=Actor.system_actor("heartbeats"),
        threshold=timedelta(seconds=settings.HEARTBEAT_TIMEOUT_S),
    )
    return len(failed)
