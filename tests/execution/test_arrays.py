"""A job array's tasks learn which one each is: ``NEOCLOUD_ARRAY_INDEX`` (and the array's id
and size) in the environment the agent is given; a workload submitted alone has none."""

from __future__ import annotations

import pytest

from tests.execution.conftest import Agent, Customer, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_each_task_of_an_array_is_told_its_index(agents: list[Agent], acme: Customer) -> None:
    body = {
        "project": str(acme.project.pk),
        "name": "shard",
        "gpu_models": ["h100"],
        "gpus_per_node": 8,
        "command": ["python", "shard.py"],
        "array": {"count": 2},
    }

    response = acme.client.post("/api/v1/workloads/batch", body, format="json")

    assert response.status_code == 201, response.json()
    array_id = response.json()["array_id"]
    envs = [a.only()["env"] for a in agents]
    assert sorted(env["NEOCLOUD_ARRAY_INDEX"] for env in envs) == ["0", "1"]
    assert {(env["NEOCLOUD_ARRAY_ID"], env["NEOCLOUD_ARRAY_COUNT"]) for env in envs} == {
        (array_id, "2")
    }
    by_index = {env["NEOCLOUD_ARRAY_INDEX"]: env["NEOCLOUD_WORKLOAD_ID"] for env in envs}
    assert [by_index[str(w["array_index"])] for w in response.json()["workloads"]] == [
        w["id"] for w in response.json()["workloads"]
    ]


def test_a_workload_submitted_alone_has_no_array_variables(
    agents: list[Agent], acme: Customer
) -> None:
    submit(acme, gpus=8)

    (env,) = [a.only()["env"] for a in agents if a.assignments()["assignments"]]

    assert [name for name in env if name.startswith("NEOCLOUD_ARRAY")] == []
