"""What a scheduling write sets off once it commits: a cycle of its cluster, the start or the
stop of runs. Registered with ``transaction.on_commit`` so that nothing starts for a write that
rolls back, and so that the cycle reads what the write committed.

The tasks that carry them out sit above the services that set them off, so they answer these
hooks (``neocloud.core.hooks``), registered in ``SchedulerConfig.ready``:

- ``cycle_dispatch`` (``call_all``): a cycle of this cluster soon (``tasks.cycle_dispatch``);
- ``runs_start_dispatch`` (``call_all``): start these granted runs (workload, allocation);
- ``run_stop_dispatch`` (``call_all``): stop this run.
- ``runs_notice_dispatch`` (``call_all``): tell these preempted runs (workload, allocation)
  they are stopped at the end of their notice.
"""

from __future__ import annotations

import uuid

from django.db import transaction

from inventory.selectors import cluster_ids
from neocloud.core.hooks import Hook

cycle_dispatch: Hook[[uuid.UUID], None] = Hook("scheduler.cycle_dispatch")
runs_start_dispatch: Hook[[list[tuple[uuid.UUID, uuid.UUID]]], None] = Hook(
    "scheduler.runs_start_dispatch"
)
run_stop_dispatch: Hook[[uuid.UUID, uuid.UUID], None] = Hook("scheduler.run_stop_dispatch")
runs_notice_dispatch: Hook[[list[tuple[uuid.UUID, uuid.UUID]]], None] = Hook(
    "scheduler.runs_notice_dispatch"
)


def cycle_request(cluster_id: uuid.UUID) -> None:
    """Ask for a cycle of the cluster soon (several asks close together make one cycle)."""
    cycle_dispatch.call_all(cluster_id)


def cycle_request_all() -> None:
    for cluster_id in cluster_ids():
        cycle_request(cluster_id)


def cycle_wanted(cluster_id: uuid.UUID) -> None:
    transaction.on_commit(lambda: cycle_request(cluster_id))


def policy_changed() -> None:
    transaction.on_commit(cycle_request_all)


def runs_start(grants: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    if grants:
        runs_start_dispatch.on_commit(grants)


def run_stop(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> None:
    run_stop_dispatch.on_commit(workload_id, allocation_id)


def runs_notice(preempted: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    if preempted:
        runs_notice_dispatch.on_commit(preempted)


def drain_check(node_ids: list[str]) -> None:
    """Draining nodes among these that are now empty go to maintenance, in a transaction of
    their own (a node's row is locked before the log's lock, never after)."""

    def check() -> None:
        from inventory import services as inventory
        from inventory.lifecycle import NodeState
        from inventory.models import Node
        from neocloud.core.transactions import atomic_with_retry
        from tenants.access import Actor

        for node in Node.objects.filter(pk__in=node_ids, state=NodeState.DRAINING):
            atomic_with_retry(
                inventory.node_drain_check, actor=Actor.system_actor("runs"), node=node
            )

    transaction.on_commit(check)
