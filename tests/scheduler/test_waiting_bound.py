"""Queued work is bounded: an organization and a project may have only so many workloads
waiting, and an array's approval threshold sees all its tasks' GPUs (issue 30 §1)."""

from __future__ import annotations

from typing import Any

import pytest
from pytest_django.fixtures import Settings

from orders import services as orders
from scheduler.models import WAITING_STATUSES, Workload
from tenants.models import Role
from tests.builders import Builder, client_with_key, run
from tests.scheduler.conftest import Tenant, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _client(build: Builder, tenant: Tenant) -> Any:
    membership = build.member(tenant.organization, Role.OWNER)
    return client_with_key(build.key(tenant.organization, membership.user)[1])


def _spec(project: Any, **fields: Any) -> dict[str, Any]:
    # 8 GPUs on a fleet of one 8-GPU node: one runs, the others wait.
    return {
        "project": str(project.pk),
        "name": "sweep",
        "gpu_models": ["h100"],
        "gpus_per_node": 8,
        "runtime_estimate_s": 600,
        **fields,
    }


def _waiting() -> int:
    return Workload.objects.filter(status__in=WAITING_STATUSES).count()


def test_a_project_with_its_limit_waiting_takes_no_more(
    build: Builder, tenant: Tenant, in_process: None, settings: Settings
) -> None:
    settings.WAITING_WORKLOADS_PER_PROJECT = 3
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)

    array = client.post(
        "/api/v1/workloads/batch", {**_spec(tenant.project), "array": {"count": 3}}, format="json"
    )
    assert array.status_code == 201, array.json()
    assert _waiting() == 2  # one of the three runs
    fits = client.post("/api/v1/workloads", _spec(tenant.project, name="fits"), format="json")
    assert fits.status_code == 201, fits.json()
    more = client.post("/api/v1/workloads", _spec(tenant.project, name="one-more"), format="json")

    assert more.status_code == 409, more.json()
    error = more.json()["error"]
    assert error["code"] == "too_much_waiting"
    assert error["details"] == {"scope": "project", "waiting": 3, "limit": 3, "adding": 1}
    assert not Workload.objects.filter(name="one-more").exists()


def test_an_array_past_the_limit_is_refused_whole(
    build: Builder, tenant: Tenant, in_process: None, settings: Settings
) -> None:
    settings.WAITING_WORKLOADS_PER_PROJECT = 5
    ready_fleet(nodes=1, gpus=8)

    response = _client(build, tenant).post(
        "/api/v1/workloads/batch", {**_spec(tenant.project), "array": {"count": 6}}, format="json"
    )

    assert response.status_code == 409, response.json()
    assert response.json()["error"]["details"]["adding"] == 6
    assert not Workload.objects.exists()


def test_a_list_over_projects_counts_against_the_organization(
    build: Builder, tenant: Tenant, in_process: None, settings: Settings
) -> None:
    settings.WAITING_WORKLOADS_PER_ORGANIZATION = 2
    ready_fleet(nodes=1, gpus=8)
    other = build.project(tenant.organization, "Inference")
    items = [_spec(tenant.project, name="a"), _spec(other, name="b"), _spec(other, name="c")]

    response = _client(build, tenant).post(
        "/api/v1/workloads/batch", {"items": items}, format="json"
    )

    assert response.status_code == 409, response.json()
    assert response.json()["error"]["details"]["scope"] == "organization"
    assert not Workload.objects.exists()


def test_an_arrays_approval_threshold_sees_all_its_tasks(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    run(orders.approval_threshold_set, threshold_gpus=8)
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)

    one = client.post(
        "/api/v1/workloads/batch", {**_spec(tenant.project), "array": {"count": 1}}, format="json"
    )
    two = client.post(
        "/api/v1/workloads/batch", {**_spec(tenant.project), "array": {"count": 2}}, format="json"
    )

    assert one.status_code == 201, one.json()
    assert two.status_code == 403, two.json()
    error = two.json()["error"]
    assert error["code"] == "approval_required"
    assert error["details"] == {"gpus": 16, "threshold": 8}
    assert Workload.objects.count() == 1
