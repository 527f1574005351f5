"""A driver that starts a workload may answer with credentials (a registry password, an
access token); the workload's stream, which its tenant reads, records the rest only."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from pytest_django.fixtures import Settings

from events import store
from inventory.drivers import WorkloadRun
from inventory.drivers.simulated import SimulatedDriver
from neocloud.core.redaction import REDACTED
from scheduler import events as ev
from scheduler import services
from scheduler.models import Workload
from tests.builders import run
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

SECRET = "registry-pw-0xdeadbeef"


class LeakyDriver(SimulatedDriver):
    def workload_start(self, run: WorkloadRun, *, idempotency_key: str) -> dict[str, Any]:
        details = super().workload_start(run, idempotency_key=idempotency_key)
        return details | {"registry_password": SECRET}


def test_a_workloads_start_details_keep_no_secret(
    settings: Settings, tenant: Tenant, in_process: None
) -> None:
    settings.PROVISIONING_DRIVER = f"{__name__}.LeakyDriver"
    ready_fleet()

    workload: Workload = run(
        services.workload_submit, project=tenant.project, spec=job("w", runtime_estimate_s=60)
    )

    assert Workload.objects.get(pk=workload.pk).status == "running"
    with connection.cursor() as cursor:
        cursor.execute("SELECT data::text FROM events_event")
        assert [row for (row,) in cursor.fetchall() if SECRET in row] == []
    (running,) = [
        e.data
        for e in store.read_stream(ev.WORKLOAD_STREAM, str(workload.pk))
        if e.type == ev.WorkloadRunning.event_type
    ]
    assert running["details"]["registry_password"] == REDACTED
    assert running["details"]["container_id"].startswith("ctr-")
