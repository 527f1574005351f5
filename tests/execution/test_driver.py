"""The agent driver's provisioning steps and its idempotent start."""

from __future__ import annotations

import pytest

from events import store
from execution import events as ev
from execution.driver import AgentDriver
from execution.models import Assignment
from inventory import services as inventory
from inventory.drivers import PROVISION_STEPS, TEARDOWN_STEPS, NodeSpec, StepFailed, WorkloadRun
from inventory.models import Node
from scheduler.models import Workload
from tests.builders import run
from tests.builders.fleet import OPERATOR, cluster, node
from tests.execution.conftest import Agent, Customer, submit

pytestmark = pytest.mark.postgres


def spec_of(name: str = "n1") -> NodeSpec:
    registered, _ = node(cluster(), name)
    return NodeSpec(
        node_id=registered.pk,
        name=registered.name,
        cluster="fra1",
        gpu_model="h100",
        gpu_count=8,
        cpu_milli=registered.cpu_milli,
        memory_mib=registered.memory_mib,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "step", [s for s in PROVISION_STEPS + TEARDOWN_STEPS if s != "verify_gpus"]
)
def test_steps_an_agent_node_does_not_need_are_recorded_as_not_needed(step: str) -> None:
    details = AgentDriver().run_step(step, spec_of(), idempotency_key=f"k:{step}")

    assert details["not_needed"].startswith("agent node: ")


@pytest.mark.django_db
def test_verify_gpus_waits_for_the_agents_first_heartbeat() -> None:
    spec = spec_of()
    with pytest.raises(StepFailed) as silent:
        AgentDriver().verify_gpus(spec, idempotency_key="k")
    run(inventory.node_heartbeat, actor=OPERATOR, node=Node.objects.get(pk=spec.node_id), gpus=[])

    details = AgentDriver().verify_gpus(spec, idempotency_key="k")

    assert silent.value.retryable is True
    assert details["gpus_expected"] == 8
    assert details["agent_heartbeat_at"]


@pytest.mark.django_db(transaction=True)
def test_starting_a_run_again_makes_no_new_assignments(agents: list[Agent], acme: Customer) -> None:
    workload = Workload.objects.get(pk=submit(acme, gpus=8, nodes=2).pk)
    assert workload.allocation_id is not None
    again = WorkloadRun(
        allocation_id=workload.allocation_id,
        workload_id=workload.pk,
        kind=workload.kind,
        node_ids=(),
        gpu_milli=1000,
        runtime_s=None,
    )

    details = AgentDriver().workload_start(again, idempotency_key="again")

    assert details == {"driver": "agent", "assignments": "2"}
    assert Assignment.objects.filter(allocation_id=workload.allocation_id).count() == 2
    assert len(store.read_stream(ev.RUN_STREAM, str(workload.allocation_id))) == 1
    details_recorded = [
        e.data["details"]
        for e in store.read_stream("workload", str(workload.pk))
        if e.type == "scheduler.WorkloadRunning"
    ]
    assert details_recorded == [{"driver": "agent", "assignments": "2"}]
