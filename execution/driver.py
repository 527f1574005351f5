"""The ``agent`` provisioning driver: nodes are existing servers whose agent runs the work.

Provisioning steps such a node does not need are recorded as not needed, not faked;
``verify_gpus`` waits for the agent's first heartbeat (what it reports is the fleet's
business) and, on a node back from a failure, for its agent to be heard from again and to
have reported the runs the failure ended as ended. A run is its assignments
(``services.assignments_create``); how it goes is read from what the agents reported;
stopping needs no message: once the allocation is released, its assignments are listed as
``stop`` (``selectors.node_desired``).
"""

from __future__ import annotations

from execution import selectors, services
from inventory import selectors as inventory
from inventory.drivers import NodeSpec, ProvisioningDriver, RunState, StepFailed, WorkloadRun
from inventory.drivers.base import StepDetails
from inventory.models import Node
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor

ACTOR = Actor.system_actor("agent-driver")
NOT_NEEDED: StepDetails = {"not_needed": "agent node: an existing server with its drivers"}


class AgentDriver(ProvisioningDriver):
    name = "agent"
    runs_programs = True

    def allocate_server(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def install_gpu_drivers(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def verify_gpus(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        """The agent has reported in (its GPUs are checked against the fleet's by the
        heartbeat itself). A node back from a failure is not ready again (so gets no new
        work) until its agent is heard from since, and has reported the runs its failure
        ended as ended: until then they may still run there, on GPUs the scheduler would
        give to others."""
        row = Node.objects.get(pk=node.node_id)
        last = row.last_heartbeat_at
        if last is None:
            raise StepFailed(f"no heartbeat from the agent of {node.name} yet", retryable=True)
        failed_at = inventory.node_failed_at(row.pk)
        if failed_at is not None and last <= failed_at:
            raise StepFailed(
                f"no heartbeat from the agent of {node.name} since it failed"
                f" ({failed_at.isoformat()})",
                retryable=True,
            )
        left = selectors.node_runs_left(row)
        if left:
            raise StepFailed(
                f"the agent of {node.name} has not reported the end of {len(left)} run"
                f"{'s' if len(left) > 1 else ''}: {', '.join(str(a.pk) for a in left[:10])}",
                retryable=True,
            )
        return {"agent_heartbeat_at": last.isoformat(), "gpus_expected": node.gpu_count}

    def connect_network(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def attach_storage(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def create_credentials(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return {"not_needed": "agent node: its agent has its node token"}

    def revoke_credentials(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return {"not_needed": "agent node: rotate its node token to cut it off"}

    def detach_storage(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def disconnect_network(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def release_server(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return dict(NOT_NEEDED)

    def workload_start(self, run: WorkloadRun, *, idempotency_key: str) -> StepDetails:
        """The run's assignments, made once per allocation (in a transaction of their own:
        the caller holds none while it calls the driver)."""
        made = atomic_with_retry(
            services.assignments_create, actor=ACTOR, allocation_id=run.allocation_id
        )
        return {"driver": "agent", "assignments": str(len(made))}

    def workload_poll(self, run: WorkloadRun, *, started_at: float, now: float) -> RunState:
        return selectors.run_state(run.allocation_id)

    def workload_stop(self, run: WorkloadRun, *, idempotency_key: str) -> StepDetails:
        return {"driver": "agent", "stop": "derived from the released allocation"}
