"""Creating projects and setting quotas while the organization's work is submitted and
scheduled, on PostgreSQL with real commits and several clients at once: no server error,
everything created."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from scheduler.models import Workload
from tenants.models import Project, Quota
from tests.builders import Builder, client_with_key
from tests.concurrency import at_once
from tests.scheduler.conftest import in_process, ready_fleet  # noqa: F401 - a fixture

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CLIENTS = 4
ROUNDS = 5


@pytest.mark.usefixtures("in_process")
def test_projects_and_quotas_created_under_load_all_succeed(build: Builder) -> None:
    ready_fleet(nodes=2)
    operator = build.user("ops@neocloud.example", is_staff=True)
    operators = build.organization("Operators", owner=operator)
    staff_key = build.key(operators, operator)[1]
    owner = build.user("owner@acme.example")
    acme = build.organization("Acme", owner=owner)
    owner_key = build.key(acme, owner)[1]
    projects = [build.project(acme, f"base-{i}") for i in range(CLIENTS)]
    statuses: list[tuple[str, int]] = []

    def record(what: str, response: Any) -> None:
        statuses.append((what, response.status_code))

    def create_projects(client_no: int) -> None:
        client = client_with_key(owner_key)
        for i in range(ROUNDS):
            body = {"organization": str(acme.pk), "name": f"p-{client_no}-{i}"}
            record("project", client.post("/api/v1/projects", body, format="json"))

    def set_quotas(client_no: int) -> None:
        client = client_with_key(staff_key)
        for i in range(ROUNDS):
            body = {
                "organization": str(acme.pk),
                "project": str(projects[client_no].pk),
                "gpu_model": "h100",
                "max_gpus": 8 + i,
            }
            record("quota", client.post("/api/v1/quotas", body, format="json"))

    def submit(client_no: int) -> None:
        client = client_with_key(owner_key)
        for i in range(ROUNDS):
            body = {
                "project": str(projects[client_no].pk),
                "name": f"w-{client_no}-{i}",
                "gpu_models": ["h100"],
                "gpus_per_node": 1,
                "runtime_estimate_s": 60,
            }
            record("workload", client.post("/api/v1/workloads", body, format="json"))

    errors = at_once(
        [partial(create_projects, n) for n in range(CLIENTS)]
        + [partial(set_quotas, n) for n in range(CLIENTS)]
        + [partial(submit, n) for n in range(CLIENTS)]
    )

    assert [repr(e) for e in errors] == []
    assert sorted(set(statuses)) == [("project", 201), ("quota", 201), ("workload", 201)]
    assert Project.objects.filter(organization=acme).count() == CLIENTS + CLIENTS * ROUNDS
    assert Quota.objects.filter(organization=acme, project__isnull=False).count() == CLIENTS
    assert Workload.objects.filter(organization=acme).count() == CLIENTS * ROUNDS
