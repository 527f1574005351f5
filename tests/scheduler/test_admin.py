"""Operators' scheduling admin: priority classes and queues are set through the services
(events), workloads are browsed and cancelled there."""

from __future__ import annotations

import pytest
from django.test import Client

from events import store
from scheduler import events as ev
from scheduler import services
from scheduler.models import PriorityClass, Queue, Workload
from tenants.models import User
from tests.builders import run
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))
    return client


def test_operator_defines_a_priority_class_and_a_queue(operator: Client, tenant: Tenant) -> None:
    response = operator.post(
        "/admin/scheduler/priorityclass/add/",
        {"name": "urgent", "value": 500, "preemptible": "", "description": "pager"},
    )
    assert response.status_code == 302
    assert PriorityClass.objects.get(name="urgent").value == 500
    assert (
        store.read_stream(ev.PRIORITY_CLASS_STREAM, "urgent")[0]
        .metadata["actor"]
        .startswith("user:")
    )
    response = operator.post(
        "/admin/scheduler/queue/add/",
        {
            "project": str(tenant.project.pk),
            "cohort": "research",
            "borrowing_limit": 16,
            "lending_limit": "",
            "weight": 2,
        },
    )
    assert response.status_code == 302
    queue = Queue.objects.get(pk=tenant.project.pk)
    assert (queue.cohort, queue.borrowing_limit, queue.weight) == ("research", 16, 2.0)


def test_operator_cancels_a_workload(operator: Client, tenant: Tenant, in_process: None) -> None:
    ready_fleet(nodes=1)
    workload = run(
        services.workload_submit, project=tenant.project, spec=job(runtime_estimate_s=60)
    )
    response = operator.post(
        "/admin/scheduler/workload/",
        {"action": "cancel", "_selected_action": [str(workload.pk)]},
    )
    assert response.status_code == 302
    assert Workload.objects.get(pk=workload.pk).status == "cancelled"
    assert operator.get(f"/admin/scheduler/workload/{workload.pk}/change/").status_code == 200
