"""Races of the scheduling service on PostgreSQL, checked by the log audit: cancels that
commit while a cycle decides, and an organization's quota under concurrent submissions from
several of its projects."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from events import store
from metering.models import OpenAllocation, UsageSlice
from scheduler import audit, scheduling, services
from scheduler import events as ev
from scheduler.models import Workload
from tenants import services as tenant_services
from tests.builders import Builder, run
from tests.builders.history import catch_up
from tests.concurrency import at_once
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _granted_after_end(workloads: list[str]) -> dict[str, list[str]]:
    """Each workload's event types in log order, for those granted after they ended."""
    checked = audit.audit_log()
    return {
        w: [e.type for e in store.read_stream(ev.WORKLOAD_STREAM, w)]
        for w in checked.granted_after_end
        if w in workloads
    }


def test_a_cancel_that_commits_while_a_cycle_decides_is_never_granted(
    tenant: Tenant, no_triggers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outside scenario's race, at a chosen point: the cycle has read the workload as
    waiting, its cancel commits, then the cycle appends. The append must fail and the cycle
    run again from the log: no grant after the cancel, nothing metered."""
    fleet = ready_fleet(nodes=1, gpus=8)
    scheduling.cycle_run(fleet.cluster.pk)  # the state is built and kept
    workload = run(services.workload_submit, project=tenant.project, spec=job(gpus=2))
    decide = scheduling._decide

    def cancel_first(state: scheduling.ClusterState) -> scheduling.CycleResult:
        if str(workload.pk) in state.view.waiting:
            run(services.workload_cancel, workload=Workload.objects.get(pk=workload.pk))
        return decide(state)

    monkeypatch.setattr(scheduling, "_decide", cancel_first)
    result = scheduling.cycle_run(fleet.cluster.pk)

    assert result.granted == 0
    ended = Workload.objects.get(pk=workload.pk)
    assert (ended.status, ended.runs, ended.allocation_id) == ("cancelled", 0, None)
    assert ended.status_reason.startswith("cancelled by")
    checked = audit.audit_log()
    assert checked.granted_after_end == set()
    assert checked.grants == 0
    catch_up()
    assert not OpenAllocation.objects.filter(workload_id=workload.pk).exists()
    assert not UsageSlice.objects.filter(workload_id=workload.pk).exists()


def test_cancels_racing_cycles_are_never_followed_by_a_grant(
    tenant: Tenant, no_triggers: None
) -> None:
    """Threads: one runs cycles back to back while two clients submit and cancel at once."""
    fleet = ready_fleet(nodes=2, gpus=8)
    done = threading.Event()
    submitted: list[str] = []

    def cycles() -> None:
        while not done.is_set():
            scheduling.cycle_run(fleet.cluster.pk)

    def client(seed: int) -> Callable[[], None]:
        def body() -> None:
            rng = random.Random(seed)
            for _ in range(40):
                workload = run(
                    services.workload_submit,
                    project=tenant.project,
                    spec=job(gpus=rng.choice((1, 2)), runtime_estimate_s=60),
                )
                submitted.append(str(workload.pk))
                done.wait(rng.uniform(0, 0.01))
                run(services.workload_cancel, workload=workload)

        return body

    def clients() -> None:
        try:
            assert not at_once([client(1), client(2)])
        finally:
            done.set()

    assert not at_once([cycles, clients])

    assert len(submitted) == 80
    assert _granted_after_end(submitted) == {}
    checked = audit.audit_log()
    assert checked.as_dict() | {"workloads": 0, "grants": 0} == {
        "workloads": 0,
        "grants": 0,
        "double_booked_gpus": 0,
        "granted_after_end": 0,
        "lost_workloads": 0,
    }
    assert set(Workload.objects.values_list("status", flat=True)) == {"cancelled"}


@pytest.mark.parametrize("projects", [2, 3], ids=["two-projects", "three-projects"])
def test_an_organizations_quota_caps_the_sum_over_its_projects_under_concurrent_submissions(
    build: Builder, tenant: Tenant, no_triggers: None, projects: int
) -> None:
    """Organization quota 5 H100, no project quotas: each project inherits 5 and they share a
    cohort, yet all of them together never hold more than 5."""
    fleet = ready_fleet(nodes=2, gpus=8)
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=None,
        gpu_model="h100",
        max_gpus=5,
    )
    members = [tenant.project] + [
        build.project(tenant.organization, f"p{i}") for i in range(1, projects)
    ]
    done = threading.Event()

    def cycles() -> None:
        while not done.is_set():
            scheduling.cycle_run(fleet.cluster.pk)
        scheduling.cycle_run(fleet.cluster.pk)

    def client(project: Any, seed: int) -> Callable[[], None]:
        def body() -> None:
            rng = random.Random(seed)
            for i in range(6):
                run(
                    services.workload_submit,
                    project=project,
                    spec=job(f"j{i}", gpus=rng.choice((1, 2)), runtime_estimate_s=600),
                )

        return body

    def clients() -> None:
        try:
            assert not at_once([client(p, i) for i, p in enumerate(members * 2)])
        finally:
            done.set()

    assert not at_once([cycles, clients])

    checked = audit.audit_log()
    key = (str(tenant.organization.pk), "h100")
    assert checked.organization_peak_usage[key] <= 5 * 1000
    held = sum(
        w.gpus_per_node * w.nodes for w in Workload.objects.filter(allocation_id__isnull=False)
    )
    assert 4 <= held <= 5  # every 1- or 2-GPU job that fits the quota holds it
    assert checked.double_booked_gpus == set()
    assert checked.lost_workloads == set()
