"""The scheduling service on real ``celery worker`` processes, PostgreSQL and Redis: the whole
path through the API; many clients at once; two workers for one cluster (one decides, the
other takes over when it dies); a worker killed while it schedules. Afterwards the log shows
no GPU double-booked and no workload lost, quotas held, and replay equals the live tables."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from events import store
from scheduler import audit, services, tasks
from scheduler import events as ev
from scheduler.models import FINAL_STATUSES, Allocation, SchedulerLease, Workload
from tenants import services as tenant_services
from tenants.models import Role
from tests.builders import Builder, client_with_key, run
from tests.celery_worker import CeleryWorker, celery_worker, wait_until, worker_queue
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FAST = {"SIMULATED_STEP_DELAY_S": 0.01, "SCHEDULER_DEBOUNCE_S": 0.02, "SCHEDULER_LEASE_S": 3}
StartWorker = Callable[..., AbstractContextManager[CeleryWorker]]


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[StartWorker]:
    """Workers on a queue of this test's own, and beat's tick every second from here."""
    with worker_queue() as queue, _beat():

        def start(**settings: Any) -> AbstractContextManager[CeleryWorker]:
            return celery_worker(queue=queue, log_dir=tmp_path, settings={**FAST, **settings})

        yield start


@contextmanager
def _beat() -> Iterator[None]:
    """What ``celery beat`` does in production: the scheduler's tick, now and then."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            tasks.tick.delay()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _submit(tenant: Tenant, name: str, **fields: Any) -> Workload:
    workload: Workload = run(
        services.workload_submit, project=tenant.project, spec=job(name, **fields)
    )
    return workload


def _all_final(count: int) -> Callable[[], bool]:
    def done() -> bool:
        return Workload.objects.filter(status__in=FINAL_STATUSES).count() >= count

    return done


def _deciders() -> list[str]:
    """The lease holder behind each grant, in log order."""
    grants = store.read_all(types=[ev.AllocationGranted.event_type], limit=10_000)
    return [str(e.metadata.get("holder")) for e in grants]


def _assert_log_whole() -> None:
    checked = audit.audit_log()
    assert checked.double_booked_gpus == set()
    assert checked.granted_after_end == set()
    assert checked.lost_workloads == set()

    def tables() -> tuple[list[Any], list[Any]]:
        return (
            sorted(
                Workload.objects.values_list("id", "status", "allocation_id", "runs", "version")
            ),
            sorted(Allocation.objects.values_list("id", "released_at", "release_reason")),
        )

    live = tables()
    call_command("replay", verbosity=0)
    assert tables() == live


def test_order_of_work_through_the_api_runs_on_a_worker(
    build: Builder, tenant: Tenant, start_worker: StartWorker
) -> None:
    ready_fleet(nodes=2)
    membership = build.member(tenant.organization, Role.MEMBER)
    _, secret = build.key(tenant.organization, membership.user)
    client = client_with_key(secret)
    with start_worker() as worker:
        response = client.post(
            "/api/v1/workloads",
            {
                "project": str(tenant.project.pk),
                "name": "finetune",
                "gpu_models": ["h100"],
                "gpus_per_node": 8,
                "nodes": 2,
                "topology": "same_rack" if False else "any",
                "runtime_estimate_s": 0.3,
            },
            format="json",
            HTTP_IDEMPOTENCY_KEY="finetune-1",
        )
        assert response.status_code == 201, response.json()
        url = f"/api/v1/workloads/{response.json()['id']}"
        seen: set[str] = set()

        def finished() -> bool:
            body = client.get(url).json()
            seen.add(body["status"])
            if body["status"] == "running":
                assert len(body["placement"]["placements"]) == 2  # a gang: both nodes at once
            return bool(body["status"] == "succeeded")

        wait_until(finished, timeout=30, what=f"the job to succeed; log:\n{worker.log()}")
    assert "running" in seen
    lease = SchedulerLease.objects.get()
    assert lease.holder == worker.name.replace("%h", lease.holder.split("@", 1)[1])
    _assert_log_whole()


def test_many_clients_submit_and_cancel_at_once_while_jobs_finish(
    build: Builder, tenant: Tenant, start_worker: StartWorker
) -> None:
    ready_fleet(nodes=2, gpus=8)
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=tenant.project,
        gpu_model="h100",
        max_gpus=12,
    )
    submitted: list[Workload] = []
    lock = threading.Lock()

    def client_work(index: int) -> None:
        try:
            for j in range(6):
                workload = _submit(
                    tenant, f"c{index}-{j}", gpus=1 + (j % 3), runtime_estimate_s=0.2
                )
                with lock:
                    submitted.append(workload)
                if j % 3 == 2:
                    run(services.workload_cancel, workload=workload)
        finally:
            connection.close()

    with start_worker() as worker:
        threads = [threading.Thread(target=client_work, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wait_until(
            _all_final(len(submitted)), timeout=90, what=f"all to finish; log:\n{worker.log()}"
        )
    assert len(submitted) == 36
    statuses = dict(Workload.objects.values_list("id", "status"))
    assert {statuses[w.pk] for w in submitted} <= {"succeeded", "cancelled"}
    checked = audit.audit_log()
    assert checked.peak_usage[(str(tenant.project.pk), "h100")] <= 12 * 1000
    _assert_log_whole()


def test_two_workers_one_decides_and_the_other_takes_over_when_it_dies(
    tenant: Tenant, start_worker: StartWorker
) -> None:
    ready_fleet(nodes=2, gpus=8)
    with start_worker() as first, start_worker() as second:
        for i in range(10):
            _submit(tenant, f"a{i}", gpus=4, runtime_estimate_s=0.2)
        wait_until(_all_final(10), timeout=60, what="the first ten to finish")
        first_deciders = {str(h) for h in _deciders()}
        assert len(first_deciders) == 1  # one holder of the lease made every grant
        (holder,) = first_deciders
        leader, standby = (first, second) if holder.startswith(first.name[:13]) else (second, first)
        leader.kill()
        for i in range(10):
            _submit(tenant, f"b{i}", gpus=4, runtime_estimate_s=0.2)
        wait_until(
            _all_final(20), timeout=60, what=f"the standby to take over; log:\n{standby.log()}"
        )
    deciders = _deciders()
    assert deciders[0] == holder
    assert deciders[-1] != holder
    assert SchedulerLease.objects.get().term >= 2
    _assert_log_whole()


def test_scheduler_worker_killed_mid_run_leaves_the_state_whole(
    tenant: Tenant, start_worker: StartWorker
) -> None:
    ready_fleet(nodes=2, gpus=8)
    with start_worker() as doomed:
        for i in range(40):
            _submit(tenant, f"k{i}", gpus=1 + i % 4, runtime_estimate_s=0.3)
        wait_until(
            lambda: Allocation.objects.exists(), timeout=30, what=f"grants; log:\n{doomed.log()}"
        )
        doomed.kill()
    time.sleep(0.5)
    with start_worker() as survivor:
        wait_until(
            _all_final(40), timeout=120, what=f"all to finish after the kill:\n{survivor.log()}"
        )
    assert set(Workload.objects.values_list("status", flat=True)) == {"succeeded"}
    _assert_log_whole()
