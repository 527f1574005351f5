"""Workloads through the API and the services, with the scheduler and runs in process (as in
the embedded default) on PostgreSQL: placement, reasons, cancel, preemption, node failure,
drain, reservations, bad input, tenant isolation, and replay."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from events import store
from inventory import services as inventory
from inventory.lifecycle import NodeAction, NodeState
from inventory.models import Node
from scheduler import audit, hooks, runs, scheduling, services, tasks
from scheduler import events as ev
from scheduler.models import Allocation, Reservation, Workload, WorkloadWait
from scheduler.specs import MAX_RUNTIME_S, RestartPolicy, WorkloadKind
from tenants import services as tenant_services
from tenants.models import Project, Role
from tests.builders import SYSTEM, Builder, client_with_key, run
from tests.scheduler.conftest import GpuFleet, Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _client(build: Builder, tenant: Tenant, role: str = Role.OWNER) -> Any:
    membership = build.member(tenant.organization, role)
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)


def _submit(tenant: Tenant, **fields: Any) -> Workload:
    name = fields.pop("name", "train")
    workload: Workload = run(
        services.workload_submit, project=tenant.project, spec=job(name, **fields)
    )
    return workload


def _state(workload: Workload) -> Workload:
    return Workload.objects.get(pk=workload.pk)


def _finish_runs() -> None:
    """Let simulated runtimes pass and the tick end them."""
    time.sleep(0.25)
    tasks.tick()


def test_submitted_job_is_placed_on_exact_gpus_runs_and_succeeds(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet()
    client = _client(build, tenant)
    response = client.post(
        "/api/v1/workloads",
        {
            "project": str(tenant.project.pk),
            "name": "llm",
            "gpu_models": ["h100"],
            "gpus_per_node": 4,
            "runtime_estimate_s": 0.2,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = client.get(f"/api/v1/workloads/{response.json()['id']}").json()
    assert body["status"] == "running"
    (placement,) = body["placement"]["placements"]
    assert placement["node_id"] in {str(n.pk) for n in fleet.nodes}
    assert len(set(placement["gpus"])) == len(placement["gpus"]) == 4
    _finish_runs()
    body = client.get(f"/api/v1/workloads/{body['id']}").json()
    assert body["status"] == "succeeded"
    assert body["placement"] is None
    types = [e["type"] for e in client.get(f"/api/v1/workloads/{body['id']}/events").json()]
    assert types == [
        "scheduler.WorkloadSubmitted",
        "scheduler.WorkloadProvisioning",
        "scheduler.WorkloadRunning",
        "scheduler.AllocationReleased",
    ]


def test_waiting_workload_says_why_with_figures_and_its_place_in_line(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    # 6 busy on each node: 2 + 2 free cannot take a 4-GPU single-node job.
    first = _submit(tenant, gpus=6, runtime_estimate_s=60)
    second = _submit(tenant, gpus=6, runtime_estimate_s=60)
    assert {_state(first).status, _state(second).status} == {"running"}
    waiting = _submit(tenant, gpus=4, topology="single_node")
    client = _client(build, tenant)
    body = client.get(f"/api/v1/workloads/{waiting.pk}").json()
    assert body["status"] in {"pending", "admitted"}
    assert body["pending_reason"]["code"] == "fragmented", body["pending_reason"]
    assert "4" in body["pending_reason"]["message"]
    assert body["queue_position"] == 1
    queues = client.get("/api/v1/queues").json()
    (queue,) = [q for q in queues if q["project"] == str(tenant.project.pk)]
    assert (queue["depth"], queue["running"]) == (1, 2)
    assert queue["usage"] == [{"gpu_model": "h100", "used": 12.0, "quota": None}]


def test_a_page_of_workloads_costs_the_same_queries_for_2_rows_as_for_10(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    """Placement, pending reason and place in line are loaded for the whole page at once."""
    ready_fleet(nodes=2, gpus=8)
    small, large = (
        build.project(tenant.organization, "Small"),
        build.project(tenant.organization, "Large"),
    )

    def submit(project: Project, name: str, gpus: int = 1, nodes: int = 1) -> Workload:
        spec = job(name, gpus=gpus, nodes=nodes, runtime_estimate_s=60)
        workload: Workload = run(services.workload_submit, project=project, spec=spec)
        return workload

    submit(tenant.project, "filler", gpus=5, nodes=2)  # 10 of the 16 GPUs
    running = [submit(small, "s-run")] + [submit(large, f"l-run{i}") for i in range(5)]
    waiting = [submit(small, "s-wait")] + [submit(large, f"l-wait{i}") for i in range(5)]
    assert {_state(w).status for w in running} == {"running"}
    assert {_state(w).status for w in waiting} <= {"pending", "admitted"}
    client = _client(build, tenant)
    client.get("/api/v1/workloads", {"project": str(small.pk)})  # the key's first use

    pages = {}
    queries = {}
    for project in (small, large):
        with CaptureQueriesContext(connection) as captured:
            response = client.get("/api/v1/workloads", {"project": str(project.pk)})
        assert response.status_code == 200
        pages[project.name], queries[project.name] = response.json()["results"], len(captured)

    assert [len(pages["Small"]), len(pages["Large"])] == [2, 10]
    assert queries["Large"] == queries["Small"], (queries, captured.captured_queries)
    rows = {row["name"]: row for row in pages["Large"]}
    assert all(rows[f"l-run{i}"]["placement"]["gpu_milli"] == 1000 for i in range(5))
    assert all(rows[f"l-run{i}"]["pending_reason"] is None for i in range(5))
    # One line per cluster, in the engine's order: Small's waiting job goes first (its
    # project used less, and it came first), then Large's by arrival.
    assert [rows[f"l-wait{i}"]["queue_position"] for i in range(5)] == [2, 3, 4, 5, 6]
    assert all(rows[f"l-wait{i}"]["pending_reason"] is not None for i in range(5))
    assert all(rows[f"l-wait{i}"]["placement"] is None for i in range(5))
    assert [row["queue_position"] for row in pages["Small"]] == [1, None]


def test_a_suspended_organizations_work_can_still_be_cancelled(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    running = _submit(tenant, gpus=8, runtime_estimate_s=600)
    waiting = _submit(tenant, gpus=8, runtime_estimate_s=600)
    client = _client(build, tenant)
    run(tenant_services.organization_suspend, organization=tenant.organization, reason="unpaid")

    submitted = client.post(
        "/api/v1/workloads",
        {
            "project": str(tenant.project.pk),
            "name": "new",
            "gpu_models": ["h100"],
            "gpus_per_node": 1,
        },
        format="json",
    )
    by_owner = client.post(f"/api/v1/workloads/{waiting.pk}/cancel")
    by_operator = run(services.workload_cancel, actor=SYSTEM, workload=running)

    assert submitted.json()["error"]["code"] == "organization_suspended"  # nothing new starts
    assert by_owner.status_code == 200, by_owner.json()
    assert by_owner.json()["status"] == "cancelled"
    assert by_operator.status == "cancelled"


@pytest.mark.parametrize("standing", ["suspended", "dunning"])
def test_work_queued_before_the_standing_changed_is_held_back_where_it_starts(
    build: Builder, tenant: Tenant, in_process: None, standing: str
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    running = _submit(tenant, gpus=8, runtime_estimate_s=600)
    waiting = _submit(tenant, gpus=8, runtime_estimate_s=600)
    client = _client(build, tenant)
    refusal = "invoice INV-7 is unpaid"
    with hooks.payment_check.registered(lambda org: refusal if standing == "dunning" else None):
        if standing == "suspended":
            run(
                tenant_services.organization_suspend,
                organization=tenant.organization,
                reason="unpaid",
            )
        scheduling.forget()  # the cycle reads standing again (at most every few seconds)
        run(services.workload_cancel, actor=SYSTEM, workload=running)  # frees the GPUs

        wait = WorkloadWait.objects.get(workload_id=waiting.pk)
        shown = client.get(f"/api/v1/workloads/{waiting.pk}").json()

    assert _state(waiting).status in {"pending", "admitted"}  # the GPUs are free: not started
    assert wait.code == "organization_standing"
    expected = "suspended" if standing == "suspended" else refusal
    assert expected in wait.message
    assert shown["pending_reason"]["code"] == "organization_standing"
    if standing == "suspended":
        run(tenant_services.organization_reactivate, organization=tenant.organization)
    scheduling.forget()
    scheduling.cycle_run(fleet.cluster.pk)
    assert _state(waiting).status == "running"  # in good standing again, it starts


def test_cancel_frees_the_gpus_for_the_next_in_line(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    running = _submit(tenant, gpus=8, runtime_estimate_s=60)
    waiting = _submit(tenant, gpus=8, runtime_estimate_s=60)
    queued_then_cancelled = _submit(tenant, gpus=8)
    client = _client(build, tenant)
    assert (
        client.post(f"/api/v1/workloads/{queued_then_cancelled.pk}/cancel").json()["status"]
        == "cancelled"
    )
    assert _state(waiting).status in {"pending", "admitted"}
    response = client.post(f"/api/v1/workloads/{running.pk}/cancel", {"reason": "done"})
    assert response.json()["status"] == "cancelled"
    assert _state(waiting).status == "running"
    assert Allocation.objects.get(workload=running).release_reason == "cancelled"


def test_production_job_preempts_experiments_and_they_are_requeued(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    experiments = [
        _submit(tenant, name=f"exp{i}", gpus=2, priority_class="low", runtime_estimate_s=60)
        for i in range(4)
    ]
    assert all(_state(e).status == "running" for e in experiments)
    production = _submit(tenant, name="prod", gpus=4, priority_class="production")
    assert _state(production).status == "running"
    states = [_state(e) for e in experiments]
    preempted = [e for e in states if e.preemptions == 1]
    assert len(preempted) == 2
    assert all(e.status in {"pending", "admitted"} for e in preempted)
    assert audit.audit_log().as_dict()["double_booked_gpus"] == 0


def test_failed_node_gives_back_its_work_which_is_retried_elsewhere(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    workload = _submit(tenant, gpus=8, retry_limit=1, runtime_estimate_s=60)
    first = Allocation.objects.get(workload=workload)
    failed_node = Node.objects.get(pk=first.placements[0]["node_id"])
    run(inventory.node_fail, node=failed_node, reason="psu")
    workload = _state(workload)
    assert workload.status == "running"
    assert workload.allocation_id not in {None, first.pk}
    assert Allocation.objects.get(pk=first.pk).release_reason == "node_failure"
    second = Allocation.objects.get(workload=workload, released_at__isnull=True)
    assert second.placements[0]["node_id"] != str(failed_node.pk)
    # Without retries left, the next failure fails it.
    run(inventory.node_fail, node=Node.objects.get(pk=second.placements[0]["node_id"]), reason="x")
    assert _state(workload).status == "failed"
    assert {n.state for n in Node.objects.filter(cluster=fleet.cluster)} == {"failed"}


def test_draining_node_goes_to_maintenance_when_its_work_ends(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    workload = _submit(tenant, gpus=2, runtime_estimate_s=0.2)
    node = fleet.nodes[0]
    run(inventory.node_transition, node=node, action=NodeAction.DRAIN)
    assert Node.objects.get(pk=node.pk).state == NodeState.DRAINING
    later = _submit(tenant, name="later", gpus=2)
    assert _state(later).status in {"pending", "admitted"}  # a draining node takes no work
    _finish_runs()
    assert _state(workload).status == "succeeded"
    assert Node.objects.get(pk=node.pk).state == NodeState.MAINTENANCE


def test_max_runtime_stops_the_job(tenant: Tenant, in_process: None) -> None:
    ready_fleet(nodes=1)
    workload = _submit(tenant, gpus=1, runtime_estimate_s=60, max_runtime_s=0.1)
    _finish_runs()
    workload = _state(workload)
    assert workload.status == "failed"
    assert "maximum runtime" in workload.status_reason


def test_reserved_gpus_serve_only_their_owner(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    now = timezone.now()
    reservation = run(
        services.reservation_create,
        project=tenant.project,
        gpu_model="h100",
        gpus=6,
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=1),
    )
    other = Tenant(tenant.organization, build.project(tenant.organization, "Other"))
    outsider = _submit(other, gpus=4)
    assert _state(outsider).status in {"pending", "admitted"}
    owner = _submit(tenant, gpus=4, reservation=reservation.pk)
    assert _state(owner).status == "running"


def test_a_reservation_records_when_it_was_cancelled_and_a_replay_rebuilds_it(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    now = timezone.now()
    kept, cancelled = (
        run(
            services.reservation_create,
            project=tenant.project,
            gpu_model="h100",
            gpus=2,
            starts_at=now + timedelta(hours=1),
            ends_at=now + timedelta(hours=2),
        )
        for _ in range(2)
    )
    run(services.reservation_cancel, reservation=cancelled, reason="plans changed")
    (cancel,) = [
        e
        for e in store.read_stream(ev.RESERVATION_STREAM, str(cancelled.pk))
        if e.type == ev.ReservationCancelled.event_type
    ]

    def rows() -> list[Any]:
        return sorted(Reservation.objects.values_list("id", "status", "cancelled_at", "version"))

    live = rows()
    assert dict((pk, at) for pk, _, at, _ in live) == {
        kept.pk: None,
        cancelled.pk: cancel.recorded_at,
    }
    call_command("replay", "scheduler.scheduling", verbosity=0)
    assert rows() == live


def test_bad_input_is_a_400_with_a_stable_code_and_nothing_written(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    base: dict[str, Any] = {"project": str(tenant.project.pk), "name": "x", "gpu_models": ["h100"]}
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"gpus_per_node": 0}, "gpus_per_node", "invalid"),
        ({"gpu_models": ["tpu"]}, "gpu_models", "invalid"),
        ({"gpus_per_node": 16}, "gpus_per_node", "unschedulable"),
        ({"priority_class": "vip"}, "priority_class", "invalid"),
        ({"topology": "single_node", "nodes": 2}, "topology", "invalid"),
    ]
    for extra, field, code in cases:
        response = client.post("/api/v1/workloads", {**base, **extra}, format="json")
        assert response.status_code == 400, (extra, response.json())
        error = response.json()["error"]
        assert error["code"] == code, error
        assert field in error["fields"], error
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=tenant.project,
        gpu_model="h100",
        max_gpus=2,
    )
    response = client.post("/api/v1/workloads", {**base, "gpus_per_node": 4}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert not Workload.objects.exists()


def test_another_tenants_workload_is_a_404_and_viewers_cannot_submit(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1)
    workload = _submit(tenant, gpus=1, runtime_estimate_s=60)
    stranger = Tenant(build.organization("Globex"), None)  # type: ignore[arg-type]
    outsider = _client(build, stranger)
    assert outsider.get(f"/api/v1/workloads/{workload.pk}").status_code == 404
    assert outsider.post(f"/api/v1/workloads/{workload.pk}/cancel").status_code == 404
    assert outsider.get("/api/v1/workloads").json()["results"] == []
    viewer = _client(build, tenant, Role.VIEWER)
    response = viewer.post(
        "/api/v1/workloads",
        {"project": str(tenant.project.pk), "name": "x", "gpu_models": ["h100"]},
        format="json",
    )
    assert response.status_code == 403


def test_quota_holds_work_back_and_releases_it_when_quota_frees(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=tenant.project,
        gpu_model="h100",
        max_gpus=8,
    )
    first = _submit(tenant, gpus=8, runtime_estimate_s=0.2)
    second = _submit(tenant, gpus=8, runtime_estimate_s=0.2)
    assert _state(first).status == "running"
    assert _state(second).status in {"pending", "admitted"}  # 8 more GPUs are free, not quota
    _finish_runs()
    assert _state(second).status == "running"


def test_replay_rebuilds_the_same_scheduling_tables(tenant: Tenant, in_process: None) -> None:
    ready_fleet(nodes=2)
    for i in range(5):
        _submit(tenant, name=f"j{i}", gpus=4, runtime_estimate_s=0.1 if i % 2 else 60)
    _finish_runs()

    def tables() -> tuple[list[Any], list[Any]]:
        return (
            sorted(
                Workload.objects.values_list(
                    "id", "status", "allocation_id", "runs", "version", "finished_at"
                )
            ),
            sorted(Allocation.objects.values_list("id", "released_at", "release_reason")),
        )

    live = tables()
    call_command("replay", verbosity=0)
    assert tables() == live
    assert audit.audit_log().as_dict() | {"workloads": 0, "grants": 0} == {
        "workloads": 0,
        "grants": 0,
        "double_booked_gpus": 0,
        "granted_after_end": 0,
        "lost_workloads": 0,
    }


def test_operator_capacity_counts_allocated_free_and_scattered_gpus(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet: GpuFleet = ready_fleet(nodes=2, gpus=8)
    _submit(tenant, gpus=6, runtime_estimate_s=60)
    operator = build.user(is_staff=True)
    client = client_with_key(None)
    client.force_authenticate(operator)
    (cluster,) = client.get("/api/v1/capacity").json()
    (h100,) = cluster["gpu_models"]
    assert cluster["cluster_id"] == str(fleet.cluster.pk)
    assert (h100["total"], h100["allocated"], h100["free"]) == (16, 6.0, 10)
    # 2 free on one node, 8 on the other: the 2 cannot serve a 4- or 8-GPU shape.
    assert h100["free_unusable_by_shape"] == {"1": 0, "2": 0, "4": 2, "8": 2}
    assert client_with_key(None).get("/api/v1/capacity").status_code in {401, 403}
    _ = SYSTEM


def test_elastic_gang_starts_on_its_minimum_when_the_rest_is_busy(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=3, gpus=8)
    _submit(tenant, name="busy", gpus=8, runtime_estimate_s=60)
    gang = _submit(tenant, name="gang", gpus=8, nodes=3, min_nodes=2, runtime_estimate_s=60)
    placements = Allocation.objects.get(workload=gang).placements
    assert len({p["node_id"] for p in placements}) == 2
    rigid = _submit(tenant, name="rigid", gpus=8, nodes=2)
    assert _state(rigid).status in {"pending", "admitted"}


def test_a_run_that_ends_while_its_scheduler_preempts_it_is_not_granted_again(
    tenant: Tenant, in_process: None
) -> None:
    """The race the end-to-end benchmark found: a cycle preempts a run in memory while the
    run's end is recorded first. The release must end it for that scheduler too."""
    fleet = ready_fleet(nodes=1, gpus=8)
    workload = _state(_submit(tenant, gpus=8, priority_class="low", runtime_estimate_s=60))
    state = scheduling._states[fleet.cluster.pk]
    state.catch_up()  # as the next cycle would: its own grant read back
    allocation_id, allocation = state.view.running.pop(str(workload.pk))
    state.engine.release(allocation)  # what the cycle's preemption did in memory
    state.view.waiting[str(workload.pk)] = False
    store.append(  # the run's end, recorded first (as run_ended records it)
        ev.WORKLOAD_STREAM,
        str(workload.pk),
        [
            ev.AllocationReleased(
                allocation_id=allocation_id,
                cluster_id=fleet.cluster.pk,
                reason="succeeded",
                message="exited 0",
                status="succeeded",
                released_at=timezone.now(),
            )
        ],
        expected_version=workload.version,
    )
    state.catch_up()
    assert str(workload.pk) not in state.view.waiting
    scheduling.cycle_run(fleet.cluster.pk)
    assert _state(workload).status == "succeeded"
    assert Allocation.objects.filter(workload=workload).count() == 1


def test_a_service_restarts_after_a_failure_by_its_policy_and_not_with_never(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=3, gpus=8)
    service = _submit(
        tenant,
        name="inference",
        gpus=8,
        kind=WorkloadKind.SERVICE,
        restart_policy=RestartPolicy.ON_FAILURE,
        runtime_estimate_s=None,
    )
    first = Allocation.objects.get(workload=service)
    run(inventory.node_fail, node=Node.objects.get(pk=first.placements[0]["node_id"]), reason="x")
    restarted = _state(service)
    assert restarted.status == "running"
    assert restarted.runs == 2
    never = _submit(
        tenant,
        name="batch",
        gpus=1,
        kind=WorkloadKind.SERVICE,
        restart_policy=RestartPolicy.NEVER,
        runtime_estimate_s=None,
    )
    held = Allocation.objects.get(workload=never)
    run(inventory.node_fail, node=Node.objects.get(pk=held.placements[0]["node_id"]), reason="y")
    assert _state(never).status == "failed"


def test_a_runtime_stored_beyond_the_bounds_never_overflows_the_run_timers(
    tenant: Tenant, in_process: None
) -> None:
    """Defence in depth: a runtime no request may ask for now (1e30 s, stored before the
    bound) still starts its run, and its checks fall due at the longest runtime allowed."""
    ready_fleet(nodes=1, gpus=8)
    blocker = _submit(tenant, name="blocker", gpus=8)
    waiting = _submit(tenant, name="waiting", gpus=8, runtime_estimate_s=60)
    Workload.objects.filter(pk=waiting.pk).update(runtime_estimate_s=1e30, max_runtime_s=1e308)

    _finish_runs()

    assert _state(blocker).status == "succeeded"
    started = _state(waiting)
    assert started.status == "running"
    assert started.allocation_id is not None
    pair = (started.pk, started.allocation_id)
    assert runs.runs_reconcile() == ([], [])
    assert runs.runs_check([pair]) == {
        pair: runs.Next(
            check_in_s=pytest.approx(MAX_RUNTIME_S, abs=5)  # type: ignore[arg-type]
        )
    }
