"""The agent driver and the agent's endpoints end to end: a workload submitted, its
assignments fetched by the agents of its nodes, their reports ending it (PROTOCOL §2-§3)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from events import store
from execution import events as ev
from execution.models import Assignment
from scheduler.models import Workload
from scheduler.specs import WorkloadKind
from tests.concurrency import at_once
from tests.execution.conftest import Agent, Customer, new_id, secret, status, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def holder(agents: list[Agent]) -> tuple[Agent, dict[str, Any]]:
    """The agent that has an assignment, and it."""
    (found,) = [(a, listed) for a in agents for listed in a.assignments()["assignments"]]
    return found


def test_a_gang_gets_one_assignment_per_node_with_a_consistent_rendezvous(
    agents: list[Agent], acme: Customer
) -> None:
    secret(acme, "HF_TOKEN", "hf-value-1")
    workload = submit(acme, gpus=8, nodes=2, env={"FOO": "bar"}, secrets=("HF_TOKEN",))

    listed = sorted((a.only() for a in agents), key=lambda x: x["rank"])

    assert status(workload)[0] == "running"
    rank0, rank1 = listed
    assert [a["rank"] for a in listed] == [0, 1]
    assert {a["desired"] for a in listed} == {"run"}
    master = Assignment.objects.get(pk=rank0["id"]).node.name
    for assignment in listed:
        env = assignment["env"]
        assert env["FOO"] == "bar"
        assert env["HF_TOKEN"] == "hf-value-1"
        assert env["MASTER_ADDR"] == master
        assert 20000 <= int(env["MASTER_PORT"]) <= 39999
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["NEOCLOUD_NNODES"]) == (
            "16",
            "8",
            "2",
        )
        assert env["NODE_RANK"] == str(assignment["rank"])
        assert env["NEOCLOUD_WORKLOAD_ID"] == str(workload.pk)
        assert env["NEOCLOUD_ASSIGNMENT_ID"] == assignment["id"]
        assert env["NEOCLOUD_PROJECT"] == acme.project.slug
        assert [g["index"] for g in assignment["gpus"]] == list(range(8))
        assert all(g["uuid"].startswith("GPU-") for g in assignment["gpus"])
        assert assignment["argv"] == ["python", "train.py"]
        assert (assignment["image"], assignment["working_dir"]) == ("", "")
        assert (assignment["stop_grace_s"], assignment["last_seq"]) == (10, 0)
    assert rank0["env"]["MASTER_PORT"] == rank1["env"]["MASTER_PORT"]
    held = Workload.objects.get(pk=workload.pk).allocation_id
    assert rank0["allocation_id"] == rank1["allocation_id"] == str(held)


def test_started_then_exited_0_succeeds_the_workload(agents: list[Agent], acme: Customer) -> None:
    workload = submit(acme)
    agent, assignment = holder(agents)

    started = agent.report(assignment["id"], "started", pid=4242, cgroups={"applied": False})
    shown = acme.get(f"workloads/{workload.pk}/assignments").json()
    exited = agent.report(assignment["id"], "exited", exit_code=0)

    assert started.json() == {"applied": [[assignment["id"], 1]], "duplicates": []}
    assert [(a["state"], a["pid"], a["node"]) for a in shown] == [
        ("running", 4242, agent.node.name)
    ]
    assert exited.status_code == 200
    assert status(workload) == ("succeeded", "exited 0")
    assert agent.assignments()["assignments"] == []
    assert acme.get(f"workloads/{workload.pk}/assignments").json()[0]["state"] == "exited"


@pytest.mark.parametrize(
    ("kind", "fields", "cause"),
    [
        ("exited", {"exit_code": 3}, "exit code 3"),
        ("exited", {"signal": 9}, "killed by signal 9"),
        ("exited", {"signal": 9, "oom": True}, "out of memory"),
        ("exited", {"message": "lost: agent restarted"}, "lost: agent restarted"),
        ("start_failed", {"message": "image not found"}, "failed to start: image not found"),
    ],
    ids=["exit-code", "signal", "oom", "lost", "start-failed"],
)
def test_a_failed_assignment_fails_the_run_naming_node_rank_and_cause(
    agents: list[Agent], acme: Customer, kind: str, fields: dict[str, Any], cause: str
) -> None:
    workload = submit(acme)
    agent, assignment = holder(agents)
    if kind == "exited":
        agent.report(assignment["id"], "started", pid=1)

    agent.report(assignment["id"], kind, **fields)

    assert status(workload) == ("failed", f"node {agent.node.name} rank 0: {cause}")


def test_a_failed_run_is_retried_on_a_new_allocation_per_retry_limit(
    agents: list[Agent], acme: Customer
) -> None:
    workload = submit(acme, retry_limit=1)
    agent, first = holder(agents)
    agent.report(first["id"], "started", pid=1)
    agent.report(first["id"], "exited", exit_code=3)

    again, second = holder(agents)
    again.report(second["id"], "started", pid=2)
    again.report(second["id"], "exited", exit_code=3)

    assert second["allocation_id"] != first["allocation_id"]
    assert status(workload) == ("failed", f"node {again.node.name} rank 0: exit code 3")
    assert Workload.objects.get(pk=workload.pk).failures == 2


def test_when_one_rank_fails_the_other_is_told_to_stop(agents: list[Agent], acme: Customer) -> None:
    workload = submit(acme, gpus=8, nodes=2)
    by_rank = {a.only()["rank"]: (a, a.only()) for a in agents}
    for agent, assignment in by_rank.values():
        agent.report(assignment["id"], "started", pid=1)

    failing, assignment = by_rank[1]
    failing.report(assignment["id"], "exited", exit_code=1)

    survivor, other = by_rank[0]
    assert status(workload) == ("failed", f"node {failing.node.name} rank 1: exit code 1")
    assert [(a["id"], a["desired"]) for a in survivor.assignments()["assignments"]] == [
        (other["id"], "stop")
    ]


def test_a_ports_report_sets_the_services_endpoints(agents: list[Agent], acme: Customer) -> None:
    workload = submit(acme, kind=WorkloadKind.SERVICE, ports=(8000,))
    agent, assignment = holder(agents)
    agent.report(assignment["id"], "started", pid=1)

    agent.report(assignment["id"], "ports", ports=[{"port": 8000, "address": "10.0.0.5:8000"}])

    assert assignment["ports"] == [8000]
    assert Workload.objects.get(pk=workload.pk).endpoints == [
        {"port": 8000, "address": "10.0.0.5:8000", "node": agent.node.name, "kind": "port"}
    ]


def test_a_resent_report_is_a_duplicate_with_no_effect(agents: list[Agent], acme: Customer) -> None:
    submit(acme)
    agent, assignment = holder(agents)

    first = agent.report(assignment["id"], "started", pid=7, seq=1)
    again = agent.report(assignment["id"], "started", pid=8, seq=1)

    assert first.json()["applied"] == [[assignment["id"], 1]]
    assert again.json() == {"applied": [], "duplicates": [[assignment["id"], 1]]}
    assert len(store.read_stream(ev.ASSIGNMENT_STREAM, assignment["id"])) == 1
    assert Assignment.objects.get(pk=assignment["id"]).pid == 7


def test_two_deliveries_of_one_batch_at_once_have_one_effect(
    agents: list[Agent], acme: Customer
) -> None:
    submit(acme)
    agent, assignment = holder(agents)
    answers: list[Any] = []

    errors = at_once(
        [lambda: answers.append(agent.report(assignment["id"], "started", pid=9, seq=1))] * 2
    )

    assert errors == []
    assert sorted(len(r.json()["applied"]) for r in answers) == [0, 1]
    assert len(store.read_stream(ev.ASSIGNMENT_STREAM, assignment["id"])) == 1


def test_a_cancelled_run_is_listed_as_stop_until_its_agent_reports_it_ended(
    agents: list[Agent], acme: Customer
) -> None:
    workload = submit(acme)
    agent, assignment = holder(agents)
    agent.report(assignment["id"], "started", pid=1)

    cancel = acme.client.post(f"/api/v1/workloads/{workload.pk}/cancel", {}, format="json")
    stopping = agent.assignments()["assignments"]
    agent.report(assignment["id"], "exited", signal=15)

    assert cancel.status_code == 200, cancel.json()
    assert [(a["id"], a["desired"]) for a in stopping] == [(assignment["id"], "stop")]
    assert agent.assignments()["assignments"] == []
    assert status(workload)[0] == "cancelled"


def test_a_cancelled_run_never_started_is_not_listed(agents: list[Agent], acme: Customer) -> None:
    workload = submit(acme)
    agent, _ = holder(agents)

    acme.client.post(f"/api/v1/workloads/{workload.pk}/cancel", {}, format="json")

    assert agent.assignments()["assignments"] == []


def test_another_nodes_token_is_401(agents: list[Agent], acme: Customer) -> None:
    mine, theirs = agents
    wrong = Agent(node=mine.node, token=theirs.token)

    response = wrong.client.get(wrong.url("assignments"))

    assert response.status_code == 401


def test_a_report_of_another_nodes_assignment_is_400_unknown_assignment(
    agents: list[Agent], acme: Customer
) -> None:
    submit(acme)
    agent, assignment = holder(agents)
    (other,) = [a for a in agents if a is not agent]

    response = other.report(assignment["id"], "started", pid=1)
    unknown = other.report(new_id(), "started", pid=1)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_assignment"
    assert list(response.json()["error"]["fields"]) == ["reports"]
    assert unknown.json()["error"]["code"] == "unknown_assignment"
    assert Assignment.objects.get(pk=assignment["id"]).state == "assigned"


def test_the_long_poll_answers_at_once_when_the_version_differs(
    agents: list[Agent], acme: Customer
) -> None:
    submit(acme)
    agent, _ = holder(agents)
    version = agent.assignments()["version"]

    began = time.monotonic()
    changed = agent.assignments(since="something-else", wait=30)

    assert changed["version"] == version
    assert time.monotonic() - began < 20


def test_the_long_poll_waits_for_a_change_then_answers_anyway(agents: list[Agent]) -> None:
    agent = agents[0]
    version = agent.assignments()["version"]

    began = time.monotonic()
    unchanged = agent.assignments(since=version, wait=1)

    assert unchanged == {"version": version, "assignments": []}
    assert time.monotonic() - began >= 0.8


@pytest.mark.parametrize(
    ("params", "field"),
    [({"wait": "61"}, "wait"), ({"wait": "soon"}, "wait"), ({"since": "x" * 65}, "since")],
    ids=["wait-too-long", "wait-not-a-number", "since-too-long"],
)
def test_bad_long_poll_parameters_are_400(
    agents: list[Agent], params: dict[str, str], field: str
) -> None:
    response = agents[0].client.get(agents[0].url("assignments"), params)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert list(response.json()["error"]["fields"]) == [field]
