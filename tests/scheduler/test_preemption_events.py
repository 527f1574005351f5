"""Each path of preemption gives its code to the ``WorkloadPreempted`` event, beside its
sentence; events recorded before codes were carried still load."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from events import store
from events.types import deserialize, upcast
from scheduler import events as ev
from scheduler import services
from scheduler.engine import PreemptionCode
from scheduler.models import Workload
from tenants import services as tenant_services
from tenants.models import Project
from tests.builders import Builder, run
from tests.scheduler.conftest import Tenant, job, ready_fleet

LONG_S = 600  # victims run this long: nothing ends while the test looks


def _submit(project: Project, name: str, gpus: int, **fields: Any) -> Workload:
    workload: Workload = run(
        services.workload_submit, project=project, spec=job(name, gpus, **fields)
    )
    return workload


def _queue(project: Project, gpus: int) -> None:
    """The project's queue (in its organization's cohort) with a quota of ``gpus``."""
    run(
        tenant_services.quota_set,
        organization=project.organization,
        project=project,
        gpu_model="h100",
        max_gpus=gpus,
    )
    run(services.queue_configure, project=project)


def _for_priority(build: Builder, tenant: Tenant) -> Workload:
    """Low-priority experiments fill the node; a production job needs half of it."""
    ready_fleet(nodes=1, gpus=8)
    for i in range(4):
        _submit(tenant.project, f"exp{i}", 2, priority_class="low", runtime_estimate_s=LONG_S)
    return _submit(tenant.project, "prod", 4, priority_class="production")


def _for_reclaim(build: Builder, tenant: Tenant) -> Workload:
    """Another project of the organization (its cohort) borrows the idle half of the node;
    this project takes its nominal half back."""
    ready_fleet(nodes=1, gpus=8)
    borrower = build.project(tenant.organization, "Borrower")
    _queue(tenant.project, 4)
    _queue(borrower, 4)
    for i in range(2):  # its nominal half, then the half it borrows
        _submit(borrower, f"theirs{i}", 4, runtime_estimate_s=LONG_S)
    return _submit(tenant.project, "mine", 4)


def _for_reservation(build: Builder, tenant: Tenant) -> Workload:
    """Preemptible work of another project holds the node when this project's reservation of
    it opens; the owner's work (of no higher priority) evicts it."""
    ready_fleet(nodes=1, gpus=8)
    guest = build.project(tenant.organization, "Guest")
    _submit(guest, "guest", 8, priority_class="low", runtime_estimate_s=LONG_S)
    now = timezone.now()
    reservation = run(
        services.reservation_create,
        project=tenant.project,
        gpu_model="h100",
        gpus=8,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=1),
    )
    return _submit(tenant.project, "mine", 8, priority_class="low", reservation=reservation.pk)


def _for_quota(build: Builder, tenant: Tenant) -> Workload:
    """The cluster has room, the project's quota has none: its own experiments make way."""
    ready_fleet(nodes=2, gpus=8)
    _queue(tenant.project, 8)
    for i in range(4):
        _submit(tenant.project, f"exp{i}", 2, priority_class="low", runtime_estimate_s=LONG_S)
    return _submit(tenant.project, "prod", 4, priority_class="production")


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("given", "code"),
    [
        pytest.param(_for_priority, PreemptionCode.PRIORITY, id="priority"),
        pytest.param(_for_reclaim, PreemptionCode.RECLAIM, id="reclaim"),
        pytest.param(_for_reservation, PreemptionCode.RESERVATION, id="reservation"),
        pytest.param(_for_quota, PreemptionCode.QUOTA, id="quota"),
    ],
)
def test_the_event_of_a_preemption_carries_the_code_of_its_path(
    build: Builder,
    tenant: Tenant,
    in_process: None,
    given: Callable[[Builder, Tenant], Workload],
    code: PreemptionCode,
) -> None:
    # given running work, when a workload comes that preempts some of it
    preemptor = given(build, tenant)

    # then it runs, and every preemption's event names it, the path's code and a sentence
    preempted = store.read_all(types=[ev.WorkloadPreempted.event_type])
    assert Workload.objects.get(pk=preemptor.pk).status == "running"
    assert preempted
    assert {e.data["by_workload_id"] for e in preempted} == {str(preemptor.pk)}
    assert {e.data["code"] for e in preempted} == {code.value}
    assert all(e.data["reason"].startswith(code.value) for e in preempted)


def test_a_preemption_recorded_without_a_code_still_loads() -> None:
    stored = {
        "workload_id": str(uuid.uuid4()),
        "allocation_id": str(uuid.uuid4()),
        "by_workload_id": str(uuid.uuid4()),
        "reason": "priority: prod (priority 100) needs its GPUs",
    }
    name = ev.WorkloadPreempted.event_type

    version, data = upcast(name, 1, stored)
    event = deserialize(name, data)

    assert version == ev.WorkloadPreempted.schema_version
    assert isinstance(event, ev.WorkloadPreempted)
    assert event.code is None
    assert event.reason == stored["reason"]
