"""Job arrays and batches through ``POST /api/v1/workloads/batch``: all or nothing, one
append for all, idempotent as a whole, per-item errors, tenant isolation, and replay."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from events.models import Event
from scheduler.models import Workload
from scheduler.services.batch import MAX_BATCH
from tenants import services as tenant_services
from tenants.models import Role
from tests.builders import Builder, client_with_key, run
from tests.scheduler.conftest import Tenant, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

URL = "/api/v1/workloads/batch"


def _client(build: Builder, tenant: Tenant) -> Any:
    membership = build.member(tenant.organization, Role.OWNER)
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)


def _body(tenant: Tenant, **fields: Any) -> dict[str, Any]:
    return {
        "project": str(tenant.project.pk),
        "name": "sweep",
        "gpu_models": ["h100"],
        "gpus_per_node": 1,
        "runtime_estimate_s": 60,
        **fields,
    }


def _submitted_events() -> int:
    return Event.objects.filter(type="scheduler.WorkloadSubmitted").count()


def test_an_array_queues_count_workloads_in_one_append(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)

    with CaptureQueriesContext(connection) as queries:
        response = client.post(URL, {**_body(tenant), "array": {"count": 5}}, format="json")

    assert response.status_code == 201, response.json()
    answer = response.json()
    rows = Workload.objects.filter(array_id=answer["array_id"]).order_by("array_index")
    assert [(w.array_index, w.array_count, w.name) for w in rows] == [
        (i, 5, "sweep") for i in range(5)
    ]
    assert [w["id"] for w in answer["workloads"]] == [str(w.pk) for w in rows]
    assert answer["count"] == 5
    # One append: one INSERT, whose events share its time and follow one another.
    submitted = Event.objects.filter(type="scheduler.WorkloadSubmitted").order_by("position")
    positions = [e.position for e in submitted]
    assert positions == list(range(positions[0], positions[0] + 5))
    assert len({e.recorded_at for e in submitted}) == 1
    assert any("INSERT INTO events_event" in q["sql"] for q in queries.captured_queries)
    events = Event.objects.filter(type="scheduler.WorkloadSubmitted")
    assert sorted(e.data["array_index"] for e in events) == list(range(5))


def test_a_list_of_workloads_is_submitted_whole(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    items = [_body(tenant, name="a"), _body(tenant, name="b", gpus_per_node=2)]

    response = client.post(URL, {"items": items}, format="json")

    assert response.status_code == 201, response.json()
    assert [(w["name"], w["array_index"]) for w in response.json()["workloads"]] == [
        ("a", None),
        ("b", None),
    ]
    assert sorted(Workload.objects.values_list("name", "gpus_per_node")) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize(
    ("bad", "field", "code"),
    [
        pytest.param({"gpus_per_node": 16}, "gpus_per_node", "unschedulable", id="too-large"),
        pytest.param({"gpus_per_node": 0}, "gpus_per_node", "min_value", id="out-of-bounds"),
        pytest.param({"gpu_models": ["b200"]}, "gpu_models", "invalid", id="unknown-model"),
        pytest.param({"gpu_count": 4}, "gpu_count", "unknown_field", id="unknown-field"),
    ],
)
def test_one_bad_item_refuses_the_batch_naming_item_and_field(
    build: Builder, tenant: Tenant, in_process: None, bad: dict[str, Any], field: str, code: str
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    items = [_body(tenant, name="ok"), _body(tenant, name="ok"), _body(tenant, **bad)]

    response = client.post(URL, {"items": items}, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "batch_refused"
    assert [(e["item"], e["field"]) for e in error["details"]["errors"]] == [(2, field)]
    assert error["details"]["errors"][0]["code"] == code
    assert Workload.objects.count() == 0
    assert _submitted_events() == 0


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        pytest.param(
            {"array": {"count": 2}, "gpu_count": 4},
            {"gpu_count": ["Unknown field."]},
            id="beside-the-array",
        ),
        pytest.param(
            {"array": {"count": 2, "size": 4}},
            {"array": ["size: Unknown field."]},
            id="in-the-array",
        ),
        pytest.param({"items": [], "count": 2}, {"count": ["Unknown field."]}, id="beside-items"),
    ],
)
def test_a_name_a_batch_does_not_take_is_refused(
    build: Builder, tenant: Tenant, in_process: None, body: dict[str, Any], fields: Any
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    if "array" in body:
        body = {**_body(tenant), **body}

    response = client.post(URL, body, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["code"], error["fields"]) == ("unknown_field", fields)
    assert _submitted_events() == 0


def test_an_array_too_large_for_the_quota_is_refused_whole(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=tenant.project,
        gpu_model="h100",
        max_gpus=4,
    )
    client = _client(build, tenant)

    response = client.post(
        URL, {**_body(tenant, gpus_per_node=8), "array": {"count": 3}}, format="json"
    )

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert response.json()["error"]["fields"] == {"gpus_per_node": ["quota_exceeded"]}
    assert Workload.objects.count() == 0
    assert _submitted_events() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"array": {"count": 0}}, "array", id="count-zero"),
        pytest.param({"array": {"count": MAX_BATCH + 1}}, "array", id="count-over-bound"),
        pytest.param({"items": []}, "items", id="no-items"),
        pytest.param({"array": {"count": 2}, "items": [{}]}, "array", id="both"),
        pytest.param({}, "array", id="neither"),
    ],
)
def test_a_malformed_batch_is_invalid_naming_the_field(
    build: Builder, tenant: Tenant, body: dict[str, Any], field: str
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    if body.keys() != {"items"}:  # a workload's fields go beside an array, not beside items
        body = {**_body(tenant), **body}

    response = client.post(URL, body, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "invalid"
    assert field in response.json()["error"]["fields"]
    assert Workload.objects.count() == 0


def test_the_same_key_and_body_replay_the_answer_and_another_body_is_422(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    body = {**_body(tenant), "array": {"count": 3}}
    key = {"HTTP_IDEMPOTENCY_KEY": "sweep-1"}

    first = client.post(URL, body, format="json", **key)
    again = client.post(URL, body, format="json", **key)
    other = client.post(URL, {**body, "array": {"count": 4}}, format="json", **key)

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert other.status_code == 422
    assert Workload.objects.count() == 3


def test_two_simultaneous_requests_with_one_key_create_once(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    body = {**_body(tenant), "array": {"count": 4}}
    barrier = threading.Barrier(2)
    answers: list[Any] = []

    def post() -> None:
        barrier.wait()
        answers.append(client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="twice"))
        connection.close()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(a.status_code for a in answers) == [201, 201]
    assert answers[0].json() == answers[1].json()
    assert Workload.objects.count() == 4
    assert _submitted_events() == 4


def test_another_tenants_project_is_not_found_in_a_batch(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    other = build.organization("Globex")
    theirs = build.project(other, "Theirs")
    client = _client(build, tenant)
    items = [_body(tenant), {**_body(tenant), "project": str(theirs.pk)}]

    listed = client.post(URL, {"items": items}, format="json")
    array = client.post(
        URL, {**_body(tenant), "project": str(theirs.pk), "array": {"count": 2}}, format="json"
    )

    assert listed.status_code == 400
    assert [(e["item"], e["field"]) for e in listed.json()["error"]["details"]["errors"]] == [
        (1, "project")
    ]
    assert array.status_code == 400
    assert "project" in array.json()["error"]["fields"]
    assert Workload.objects.count() == 0


def test_a_replay_rebuilds_the_arrays_workloads_as_they_were(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    response = client.post(URL, {**_body(tenant), "array": {"count": 3}}, format="json")
    assert response.status_code == 201

    def rows() -> list[Any]:
        return sorted(
            Workload.objects.values_list(
                "id", "array_id", "array_index", "array_count", "status", "version"
            )
        )

    live = rows()
    call_command("replay", "scheduler.scheduling", verbosity=0)

    assert rows() == live
    assert {r[1] for r in live} == {uuid.UUID(response.json()["array_id"])}
