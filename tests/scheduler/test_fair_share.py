"""Fair share in the live scheduler: the decayed usage of each organization and queue, kept
from the allocation log, orders the work of equal priority."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from scheduler import scheduling, services
from scheduler.models import Workload
from tenants import services as tenant_services
from tenants.models import Organization, Project
from tests.builders import SYSTEM, Builder, run
from tests.scheduler.conftest import job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

STEP_S = 300
STEPS = 48


def _tenant(build: Builder, name: str, weight: float) -> Project:
    organization: Organization = build.organization(name)
    project: Project = build.project(organization, "Training")
    run(
        tenant_services.quota_set,
        organization=organization,
        project=project,
        gpu_model="h100",
        max_gpus=4,
    )
    run(services.queue_configure, project=project, weight=weight)
    return project


def _end_runs() -> None:
    for workload in Workload.objects.filter(allocation_id__isnull=False):
        assert workload.allocation_id is not None
        with transaction.atomic():
            holder = services.run_holder(workload.pk, workload.allocation_id)
            assert holder is not None
            services.run_ended(actor=SYSTEM, workload=holder, reason="succeeded", message="done")


def test_two_tenants_shares_converge_to_their_weights(
    build: Builder,
    no_triggers: None,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both tenants always have more work than the 4 GPUs hold; every 5 minutes (a fake
    clock) each job ends and a cycle runs. Weights 3 and 1: the first holds about three
    quarters of the GPU time once its decayed usage has built up, not half."""
    settings.SCHEDULER_FAIRSHARE_HALF_LIFE_S = 1800
    clock: list[datetime] = [timezone.now()]
    monkeypatch.setattr(timezone, "now", lambda: clock[0])
    fleet = ready_fleet(nodes=1, gpus=4)
    heavy, light = _tenant(build, "Heavy", 3.0), _tenant(build, "Light", 1.0)
    held: dict[str, list[int]] = {"heavy": [], "light": []}
    for _step in range(STEPS):
        for project in (heavy, light):
            waiting = Workload.objects.filter(
                project=project, status__in=["pending", "admitted"]
            ).count()
            for _ in range(4 - waiting):
                run(services.workload_submit, project=project, spec=job(runtime_estimate_s=STEP_S))
        scheduling.cycle_run(fleet.cluster.pk)
        for name, project in (("heavy", heavy), ("light", light)):
            held[name].append(
                Workload.objects.filter(project=project, allocation_id__isnull=False).count()
            )
        clock[0] += timedelta(seconds=STEP_S)
        _end_runs()

    assert [a + b for a, b in zip(held["heavy"], held["light"], strict=True)] == [4] * STEPS
    later = slice(STEPS // 2, None)
    share = sum(held["heavy"][later]) / (sum(held["heavy"][later]) + sum(held["light"][later]))
    assert share == pytest.approx(0.75, abs=0.06)
