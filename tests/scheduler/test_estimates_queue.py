"""Start-time estimates on a queue of their own: a worker that takes only that queue makes
them, and nothing of them goes to the queue runs and cycles share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.cache import cache

from scheduler import tasks
from scheduler.models import WorkloadEstimate
from tests.celery_worker import (
    celery_worker,
    purge_queue,
    redis_url,
    wait_until,
    worker_queue,
)
from tests.scheduler.conftest import Tenant, ready_fleet, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_a_worker_of_the_estimates_queue_alone_makes_the_estimates(
    tenant: Tenant, in_process: None, settings: Any, tmp_path: Path
) -> None:
    ready_fleet(nodes=1, gpus=8)
    submitted(tenant.project, "running", gpus=8, runtime_estimate_s=3600)
    waiting = submitted(tenant.project, "waiting", gpus=8, runtime_estimate_s=3600)
    cache.clear()
    with worker_queue() as shared:
        own = f"{shared}-estimates"
        settings.SCHEDULER_ESTIMATE_QUEUE = own
        try:
            with celery_worker(queue=own, log_dir=tmp_path):
                tasks.estimates_dispatch(waiting.cluster_id)
                wait_until(
                    lambda: WorkloadEstimate.objects.filter(workload_id=waiting.pk).exists(),
                    timeout=60,
                    what="the estimates worker to estimate the waiting workload",
                )
            assert redis.Redis.from_url(redis_url()).llen(shared) == 0
        finally:
            purge_queue(redis_url(), own)
