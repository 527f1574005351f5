"""A node cut off from the control plane and back (issue 29 §3): the runs its failure ended
are listed ``stop`` to its agent, and the node takes no new work (it is not ready again)
until its agent is heard from since it failed and has reported those runs ended."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from pytest_django.fixtures import Settings

from inventory import services as inventory
from inventory.models import Node, ProvisioningStep
from scheduler.models import Allocation, Workload
from tests.builders import run
from tests.builders.fleet import OPERATOR
from tests.execution.conftest import Agent, Customer, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture(autouse=True)
def _two_attempts(settings: Settings) -> None:
    settings.PROVISIONING_MAX_ATTEMPTS = 2  # eager retries: a closed gate fails the run fast


def heartbeat(agent: Agent) -> dict[str, Any]:
    response = agent.client.post(agent.url("heartbeat"), {"gpus": []}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()  # type: ignore[no-any-return]


def cut_off(agent: Agent) -> None:
    """The node's agent was last heard two minutes ago: the heartbeat check fails it."""
    Node.objects.filter(pk=agent.node.pk).update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=2)
    )
    failed = inventory.heartbeats_check(actor=OPERATOR, threshold=timedelta(seconds=90))
    assert [n.pk for n in failed] == [agent.node.pk]


def provision(agent: Agent) -> tuple[str, str]:
    """An operator brings the node back (eager: the whole run); its state and the last
    error of its ``verify_gpus`` step."""
    node = run(inventory.node_provision, node=Node.objects.get(pk=agent.node.pk))
    step = ProvisioningStep.objects.get(node=node, run=node.provisioning_run, step="verify_gpus")
    return Node.objects.get(pk=node.pk).state, step.last_error


def test_a_failed_nodes_runs_are_stopped_before_it_takes_work_again(
    agents: list[Agent], acme: Customer
) -> None:
    workload = submit(acme, gpus=8, retry_limit=1)
    (holder, listed), *_ = [(a, x) for a in agents for x in a.assignments()["assignments"]]
    (other,) = [a for a in agents if a is not holder]
    holder.report(listed["id"], "started", pid=4242)

    cut_off(holder)  # the run goes on over there, unseen
    answer = heartbeat(holder)  # ... and its agent is back
    back = [(a["id"], a["desired"]) for a in holder.assignments()["assignments"]]
    too_soon = provision(holder)

    assert Allocation.objects.get(pk=listed["allocation_id"]).release_reason == "node_failure"
    assert Workload.objects.get(pk=workload.pk).status == "running"  # requeued, placed again
    assert [a["desired"] for a in other.assignments()["assignments"]] == ["run"]
    assert (answer["state"], answer["accepting_work"]) == ("failed", False)
    assert back == [(listed["id"], "stop")]
    assert too_soon[0] == "failed"
    assert f"has not reported the end of 1 run: {listed['id']}" in too_soon[1]
    holder.report(listed["id"], "exited", signal=15)
    heartbeat(holder)
    assert provision(holder) == ("ready", "")
    assert holder.assignments()["assignments"] == []


def test_a_failed_node_is_not_ready_again_before_its_agent_is_heard_from(
    agents: list[Agent],
) -> None:
    agent = agents[0]
    heartbeat(agent)
    cut_off(agent)

    silent = provision(agent)
    heartbeat(agent)
    heard = provision(agent)

    assert silent[0] == "failed"
    assert f"no heartbeat from the agent of {agent.node.name} since it failed" in silent[1]
    assert heard == ("ready", "")
