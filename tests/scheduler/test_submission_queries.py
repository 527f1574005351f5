"""What one submission and one page of workloads cost in queries (a bound that grows with
neither the rows shown nor the fleet), the fleet's facts read once per change of the fleet,
and the place in line the engine's own order gives."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from events.replay import projections_replay
from inventory import services as inventory
from inventory.models import Cluster, GpuModel
from scheduler import services
from scheduler.models import Workload
from scheduler.selectors import workload_states
from tenants.models import Project, Role
from tests.builders import Builder, client_with_key, run
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# Before the fleet's facts were kept: 26 for a submission (GPU models, priority class,
# cluster choice, the cluster and the shape check were 5 queries of every one; two
# savepoints, two queries of invoices, two of quotas). A page: 8 (key, membership, page,
# allocations, use, reasons, place in line, estimated starts); work of several queues
# waiting on a cluster adds 5 for it (its policy and decayed usage, for fair share). A
# submission's answer shows the workload as a page does: its estimate is one of its 20 (the
# waiting bound counts the organization's and the project's waiting work in one more).
SUBMISSION_QUERIES = 20
PAGE_QUERIES = 8


def _client(build: Builder, tenant: Tenant) -> Any:
    membership = build.member(tenant.organization, Role.OWNER)
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)


def _body(project: Project, name: str, **fields: Any) -> dict[str, Any]:
    return {"project": str(project.pk), "name": name, "gpu_models": ["h100"], **fields}


def _post_queries(client: Any, project: Project, name: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.post("/api/v1/workloads", _body(project, name), format="json")
    assert response.status_code == 201, response.json()
    return len(captured)


def _add_nodes(cluster: Cluster, count: int, gpus: int = 8, first: int = 10) -> None:
    model = GpuModel.objects.get(slug="h100")
    for i in range(first, first + count):
        run(
            inventory.node_register,
            cluster=cluster,
            name=f"{cluster.slug}-n{i:02d}",
            gpu_model=model,
            cpu_milli=128_000,
            memory_mib=1_048_576,
            gpus=[inventory.GpuSlot(index=g) for g in range(gpus)],
        )


def test_one_submission_costs_the_same_queries_on_a_fleet_of_2_nodes_as_of_10(
    build: Builder, tenant: Tenant
) -> None:
    fleet = ready_fleet(nodes=2)
    client = _client(build, tenant)
    _post_queries(client, tenant.project, "first")  # the key's first use; facts read
    small = _post_queries(client, tenant.project, "small")
    _add_nodes(fleet.cluster, 8)
    _post_queries(client, tenant.project, "after the change")  # the facts again
    large = _post_queries(client, tenant.project, "large")
    assert small == large <= SUBMISSION_QUERIES


def test_a_page_costs_a_bound_of_queries_for_2_rows_as_for_20(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    """One running (its allocation, its use), the rest waiting (why, their place)."""
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    client.get("/api/v1/workloads")  # the key's first use
    counts = {}
    for rows in (2, 20):
        for n in range(Workload.objects.count(), rows):
            spec = job(f"w{n}", gpus=8, runtime_estimate_s=600)
            run(services.workload_submit, project=tenant.project, spec=spec)
        with CaptureQueriesContext(connection) as captured:
            response = client.get("/api/v1/workloads")
        shown = response.json()["results"]
        assert len(shown) == rows
        assert sorted(w["queue_position"] or 0 for w in shown) == list(range(rows))
        counts[rows] = len(captured)
    assert counts[2] == counts[20] <= PAGE_QUERIES, counts


def test_a_fleet_change_made_elsewhere_changes_the_next_answer(
    build: Builder, tenant: Tenant
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    two_nodes = _body(tenant.project, "gang", gpus_per_node=8, nodes=2)
    refused = client.post("/api/v1/workloads", two_nodes, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"gpus_per_node": ["too_large"]}

    # Another process's write: its own connection, committed before the next request.
    def register() -> None:
        try:
            _add_nodes(Cluster.objects.get(pk=fleet.cluster.pk), 1)
        finally:
            connections.close_all()

    other = threading.Thread(target=register)
    other.start()
    other.join()

    accepted = client.post("/api/v1/workloads", two_nodes, format="json")
    assert accepted.status_code == 201, accepted.json()


def test_a_priority_class_defined_counts_at_the_next_submission(
    build: Builder, tenant: Tenant
) -> None:
    ready_fleet(nodes=1)
    client = _client(build, tenant)
    before = client.post("/api/v1/workloads", _body(tenant.project, "a"), format="json")
    assert before.json()["priority"] == 100  # the built-in "standard"
    run(services.priority_class_define, name="standard", value=150)
    after = client.post("/api/v1/workloads", _body(tenant.project, "b"), format="json")
    assert after.json()["priority"] == 150


def test_after_a_replay_the_facts_hold_and_the_next_change_counts(
    build: Builder, tenant: Tenant
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    two_nodes = _body(tenant.project, "gang", gpus_per_node=8, nodes=2)
    assert client.post("/api/v1/workloads", two_nodes, format="json").status_code == 400
    projections_replay()
    assert client.post("/api/v1/workloads", two_nodes, format="json").status_code == 400
    _add_nodes(fleet.cluster, 1)
    assert client.post("/api/v1/workloads", two_nodes, format="json").status_code == 201


def test_place_in_line_is_the_engines_order_not_the_order_of_arrival(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    """The cluster is full; then, in this order: a standard job of the project using it, a
    standard job of a project that uses nothing, a high-priority job. The engine considers
    the high one first, then fair share puts the idle project's before the busy one's,
    though it came later."""
    ready_fleet(nodes=1, gpus=8)
    idle = build.project(tenant.organization, "Idle")
    filler = run(
        services.workload_submit,
        project=tenant.project,
        spec=job("filler", gpus=8, runtime_estimate_s=3600),
    )
    assert Workload.objects.get(pk=filler.pk).status == "running"
    submitted = {}
    for project, name, priority_class in (
        (tenant.project, "busy", "standard"),
        (idle, "idle", "standard"),
        (tenant.project, "urgent", "high"),
    ):
        spec = job(name, gpus=8, priority_class=priority_class, runtime_estimate_s=60)
        submitted[name] = run(services.workload_submit, project=project, spec=spec)
    states = workload_states(Workload.objects.filter(pk__in=[w.pk for w in submitted.values()]))
    places = {name: states[w.pk].queue_position for name, w in submitted.items()}
    assert places == {"urgent": 1, "idle": 2, "busy": 3}


def test_a_workload_whose_cancel_was_asked_has_no_place_in_line(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    filler = job("filler", gpus=8, runtime_estimate_s=3600)
    run(services.workload_submit, project=tenant.project, spec=filler)
    first = run(services.workload_submit, project=tenant.project, spec=job("first", gpus=8))
    second = run(services.workload_submit, project=tenant.project, spec=job("second", gpus=8))
    Workload.objects.filter(pk=first.pk).update(cancel_requested=True)  # its cancel under way
    states = workload_states(Workload.objects.filter(pk__in=[first.pk, second.pk]))
    assert (states[first.pk].queue_position, states[second.pk].queue_position) == (None, 1)
