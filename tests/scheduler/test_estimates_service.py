"""Start-time estimates of waiting work, on PostgreSQL with the scheduler in process: the
forecast stored per workload, the work that can never start, one refresh at a time, the task
asked for at most once per interval, the error metric once work starts, and the API's fields
(tenant scoped, no query per row)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import psycopg
import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inventory import services as inventory
from inventory.lifecycle import NodeAction
from inventory.models import Cluster
from scheduler import services, tasks
from scheduler.engine.forecast import Basis
from scheduler.models import Allocation, Workload, WorkloadEstimate
from scheduler.services.estimates import LOCK_CLASS
from tests.builders import Builder, client_with_key, run
from tests.monitoring.conftest import metric_value
from tests.scheduler.conftest import Tenant, ready_fleet, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
HOUR = 3600.0
COUNT = "neocloud_start_estimate_error_seconds_count"


@dataclass
class Line:
    """A job holding the whole node for an hour (by its estimate), another waiting behind."""

    running: Workload
    waiting: Workload


@pytest.fixture
def line(tenant: Tenant, in_process: None) -> Line:
    ready_fleet(nodes=1, gpus=8)
    running = submitted(tenant.project, "running", gpus=8, runtime_estimate_s=HOUR)
    waiting = submitted(tenant.project, "waiting", gpus=8, runtime_estimate_s=HOUR)
    assert (running.status, waiting.status) == ("running", "admitted")
    return Line(running, waiting)


def _client(build: Builder, tenant: Tenant) -> Any:
    membership = build.member(tenant.organization, "owner")
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)


def _refresh(workload: Workload) -> services.EstimatesRefreshed:
    refreshed: services.EstimatesRefreshed = services.workload_estimates_refresh(
        cluster_id=workload.cluster_id
    )
    return refreshed


def test_work_behind_a_running_job_is_expected_when_that_job_ends(
    build: Builder, tenant: Tenant, line: Line
) -> None:
    running, waiting = line.running, line.waiting

    refreshed = _refresh(waiting)

    granted = Allocation.objects.get(workload=running).granted_at
    estimate = WorkloadEstimate.objects.get(workload_id=waiting.pk)
    assert (refreshed.ran, refreshed.estimated) == (True, 1)
    # No history: a user's estimate is expected to be half used, from a fifth to all of it.
    assert estimate.estimated_start is not None
    assert estimate.earliest is not None
    assert estimate.latest is not None
    expected = granted + timedelta(seconds=HOUR / 2)
    assert abs((estimate.estimated_start - expected).total_seconds()) < 30
    assert abs((estimate.earliest - (granted + timedelta(seconds=HOUR / 5))).total_seconds()) < 30
    assert abs((estimate.latest - (granted + timedelta(seconds=HOUR))).total_seconds()) < 30
    assert estimate.basis == ["runtime_estimates"]
    assert estimate.first_estimated_start == estimate.estimated_start

    body = _client(build, tenant).get(f"/api/v1/workloads/{waiting.pk}").json()
    assert body["estimated_start"] is not None
    assert abs((_at(body["estimated_start"]) - expected).total_seconds()) < 30
    assert set(body["estimated_start_range"]) == {"earliest", "latest"}
    assert _at(body["estimated_start_range"]["earliest"]) < _at(body["estimated_start"])
    assert _at(body["estimated_start_range"]["latest"]) > _at(body["estimated_start"])
    assert body["estimate_basis"] == ["runtime_estimates"]
    assert "runtime estimates of the work ahead" in body["estimate_message"]
    running_body = _client(build, tenant).get(f"/api/v1/workloads/{running.pk}").json()
    assert running_body["estimated_start"] is None
    assert running_body["estimate_basis"] is None


def test_urgent_work_submitted_in_the_recent_past_is_expected_again_and_delays_the_line(
    tenant: Tenant, line: Line, settings: Any
) -> None:
    """The submissions of the last window are expected to come again one window later: an
    urgent one submitted 2 h 50 min ago is expected in 10 min, before the running job ends,
    and then goes first, so the waiting job is expected to start after it has run too."""
    waiting = line.waiting
    run(services.priority_class_define, name="urgent", value=1000)
    urgent = submitted(
        tenant.project, "urgent", gpus=8, runtime_estimate_s=HOUR, priority_class="urgent"
    )
    run(services.workload_cancel, workload=urgent, reason="")
    now = timezone.now()
    Cluster.objects.filter(pk=waiting.cluster_id).update(created_at=now - timedelta(hours=4))
    Workload.objects.filter(pk=urgent.pk).update(
        submitted_at=now - timedelta(hours=3) + timedelta(minutes=10)
    )

    settings.SCHEDULER_ESTIMATE_ARRIVALS_WINDOW_S = 0
    _refresh(waiting)
    alone = WorkloadEstimate.objects.get(workload_id=waiting.pk).estimated_start
    settings.SCHEDULER_ESTIMATE_ARRIVALS_WINDOW_S = 3 * HOUR
    _refresh(waiting)
    expecting = WorkloadEstimate.objects.get(workload_id=waiting.pk).estimated_start

    assert alone is not None
    assert expecting is not None
    # The urgent job's replay runs half its estimate (no history), after the running job.
    assert abs((expecting - alone).total_seconds() - HOUR / 2) < 30


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_work_no_node_could_ever_hold_says_so_instead_of_a_time(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    # Cordoned, a node takes no work until an operator says so: a gang of both waits for it.
    run(inventory.node_transition, node=fleet.nodes[0], action=NodeAction.CORDON)
    too_big = submitted(tenant.project, "too-big", gpus=8, nodes=2)

    _refresh(too_big)

    estimate = WorkloadEstimate.objects.get(workload_id=too_big.pk)
    assert (estimate.estimated_start, estimate.basis) == (None, ["never"])
    body = _client(build, tenant).get(f"/api/v1/workloads/{too_big.pk}").json()
    assert body["estimated_start"] is None
    assert body["estimated_start_range"] is None
    assert body["estimate_basis"] == ["never"]
    assert body["estimate_message"].startswith("It can never start on this cluster")


def test_a_tenant_never_sees_another_tenants_estimates(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    submitted(tenant.project, "running", gpus=8, runtime_estimate_s=HOUR)
    theirs = submitted(tenant.project, "theirs", gpus=8)
    other_org = build.organization("Globex")
    other = Tenant(other_org, build.project(other_org, "Research"))
    mine = submitted(other.project, "mine", gpus=8)
    _refresh(mine)
    assert WorkloadEstimate.objects.filter(workload_id__in=[theirs.pk, mine.pk]).count() == 2

    client = _client(build, other)
    listed = client.get("/api/v1/workloads").json()["results"]
    alien = client.get(f"/api/v1/workloads/{theirs.pk}")

    assert [w["name"] for w in listed] == ["mine"]
    assert listed[0]["estimated_start"] is not None
    assert alien.status_code == 404
    assert "estimate" not in alien.content.decode()


def test_a_page_of_workloads_reads_estimates_without_a_query_per_row(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    small = build.project(tenant.organization, "Small")
    submitted(tenant.project, "running", gpus=4, runtime_estimate_s=HOUR)
    submitted(small, "s-running", gpus=4, runtime_estimate_s=HOUR)
    submitted(small, "s-wait", gpus=8)
    for i in range(8):
        last = submitted(tenant.project, f"wait{i}", gpus=8, runtime_estimate_s=HOUR)
    _refresh(last)
    client = _client(build, tenant)
    client.get("/api/v1/workloads", {"project": str(small.pk)})  # the key's first use

    counts = {}
    for project in (small, tenant.project):
        with CaptureQueriesContext(connection) as captured:
            response = client.get("/api/v1/workloads", {"project": str(project.pk)})
        rows = response.json()["results"]
        counts[project.name] = len(captured)
        assert all(r["estimate_basis"] for r in rows if r["status"] != "running")
        assert len(rows) == (2 if project == small else 9)

    assert counts["Small"] == counts[tenant.project.name], counts


def test_a_refresh_while_another_runs_does_nothing(line: Line) -> None:
    waiting = line.waiting
    # Another process's refresh of this cluster: its session holds the lock.
    key = int.from_bytes(waiting.cluster_id.bytes[:4], "big", signed=True)
    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        password=settings["PASSWORD"] or None,
        autocommit=True,
    )
    try:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_CLASS, key])
        assert tasks.estimate_cluster(str(waiting.cluster_id)) is False
        assert not WorkloadEstimate.objects.exists()
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, key])
        assert tasks.estimate_cluster(str(waiting.cluster_id)) is True
    finally:
        other.close()
    assert WorkloadEstimate.objects.filter(workload_id=waiting.pk).exists()


def test_estimates_are_asked_for_at_most_once_per_interval(
    tenant: Tenant, in_process: None, settings: Any
) -> None:
    settings.SCHEDULER_ESTIMATE_INTERVAL_S = 30
    fleet = ready_fleet(nodes=1, gpus=8)
    cache.clear()
    with mock.patch.object(tasks.estimate_cluster, "apply_async") as sent:
        for _ in range(3):
            tasks.estimates_dispatch(fleet.cluster.pk)
    sent.assert_called_once_with((str(fleet.cluster.pk),))


def test_a_cycle_task_asks_for_estimates_and_the_tick_does_in_process(line: Line) -> None:
    waiting = line.waiting
    cache.clear()
    with mock.patch.object(tasks, "estimates_dispatch") as dispatch:
        tasks.schedule_cluster(str(waiting.cluster_id))
    dispatch.assert_called_once_with(waiting.cluster_id)

    tasks.tick()  # in process: after its cycles, the estimates themselves

    assert WorkloadEstimate.objects.filter(workload_id=waiting.pk).exists()


def test_once_work_starts_the_error_of_its_estimates_is_observed_and_the_row_goes(
    tenant: Tenant, line: Line
) -> None:
    running, waiting = line.running, line.waiting
    cancelled = submitted(tenant.project, "cancelled", gpus=8)
    _refresh(waiting)
    estimate = WorkloadEstimate.objects.get(workload_id=waiting.pk)
    assert estimate.estimated_start is not None
    cluster = str(waiting.cluster_id)
    before = {
        kind: metric_value(COUNT, cluster_id=cluster, kind=kind)
        for kind in ("at_submission", "latest")
    }
    run(services.workload_cancel, workload=cancelled, reason="")
    run(services.workload_cancel, workload=running, reason="")  # the waiting one starts now
    assert Workload.objects.get(pk=waiting.pk).status in {"provisioning", "running"}

    refreshed = _refresh(waiting)

    started = Allocation.objects.get(workload=waiting).granted_at
    error = abs((estimate.estimated_start - started).total_seconds())
    assert (refreshed.observed, refreshed.dropped) == (1, 1)
    assert not WorkloadEstimate.objects.exists()
    for kind in ("at_submission", "latest"):
        count = metric_value(COUNT, cluster_id=cluster, kind=kind)
        assert count == before[kind] + 1, kind
    total = metric_value(
        "neocloud_start_estimate_error_seconds_sum", cluster_id=cluster, kind="latest"
    )
    assert total == pytest.approx(error, abs=1.0)
    assert error > HOUR / 2 - 60  # it started at once, not in half an hour


def test_the_schema_documents_the_estimate_fields(client: Client) -> None:
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    fields = schema["components"]["schemas"]["Workload"]["properties"]
    basis = schema["components"]["schemas"]["EstimateBasisEnum"]["enum"]

    assert fields["estimated_start"]["format"] == "date-time"
    assert fields["estimated_start"]["nullable"] is True
    assert fields["estimated_start_range"]["allOf"] == [
        {"$ref": "#/components/schemas/EstimateRange"}
    ]
    assert fields["estimate_basis"]["type"] == "array"
    assert {"never", "now", "runtime_estimates", "learned_runtimes", "quota"} <= set(basis)
    assert "estimate_message" in fields


def test_a_run_that_outlives_its_expected_end_moves_the_estimate_behind_it_out(
    line: Line,
) -> None:
    running, waiting = line.running, line.waiting
    granted = Allocation.objects.get(workload=running).granted_at
    _refresh(waiting)
    first = WorkloadEstimate.objects.get(workload_id=waiting.pk).estimated_start
    assert first is not None
    # 45 min after the grant: past the 30 min expected of its hour's estimate, still running.
    later = granted + timedelta(seconds=0.75 * HOUR)

    with mock.patch("django.utils.timezone.now", return_value=later):
        _refresh(waiting)

    moved = WorkloadEstimate.objects.get(workload_id=waiting.pk)
    assert moved.estimated_start is not None
    assert moved.estimated_start > first
    assert Basis.NOW.value not in moved.basis
    # Having run 45 min past what it was expected to, it is expected to run half as long again.
    expected = granted + timedelta(seconds=1.5 * 0.75 * HOUR)
    assert abs((moved.estimated_start - expected).total_seconds()) < 1


def test_beat_refreshes_the_estimates_on_its_own_schedule_without_a_cycle(
    settings: Any, line: Line
) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["scheduler-estimates-refresh"]
    assert entry == {
        "task": "scheduler.estimates_refresh",
        "schedule": settings.SCHEDULER_ESTIMATES_REFRESH_S,
    }
    assert WorkloadEstimate.objects.count() == 0

    tasks.estimates_refresh.delay()

    estimate = WorkloadEstimate.objects.get(workload_id=line.waiting.pk)
    assert estimate.estimated_start is not None
    assert WorkloadEstimate.objects.count() == 1
