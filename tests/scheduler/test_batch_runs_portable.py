"""Runs granted together start in one batch (``Scheduling._statements``) on either database:
the embedded default's SQLite too, where the statements once carried PostgreSQL casts."""

from __future__ import annotations

import pytest

from scheduler.models import Workload, WorkloadStatus
from tests.builders import Builder
from tests.scheduler.conftest import Tenant, ready_fleet
from tests.scheduler.test_batch_submission import URL, _body, _client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]


def test_an_arrays_tasks_granted_in_one_cycle_all_start(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)

    response = client.post(URL, {**_body(tenant), "array": {"count": 3}}, format="json")

    assert response.status_code == 201, response.json()
    rows = Workload.objects.filter(array_id=response.json()["array_id"])
    assert sorted(w.status for w in rows) == [WorkloadStatus.RUNNING] * 3
    assert all(w.started_at is not None for w in rows)
