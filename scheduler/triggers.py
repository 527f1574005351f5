"""What a scheduling write sets off once it commits: a cycle of its cluster, the stop of a
run. Registered with ``transaction.on_commit`` so that nothing starts for a write that rolls
back, and so that the cycle reads what the write committed."""

from __future__ import annotations

import uuid

from django.db import transaction


def cycle_wanted(cluster_id: uuid.UUID) -> None:
    from scheduler import scheduling

    transaction.on_commit(lambda: scheduling.cycle_request(cluster_id))


def policy_changed() -> None:
    from scheduler import scheduling

    transaction.on_commit(scheduling.cycle_request_all)


def runs_start(grants: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    from scheduler import tasks

    if grants:
        transaction.on_commit(lambda: tasks.runs_start_dispatch(grants))


def run_stop(workload_id: uuid.UUID, allocation_id: uuid.UUID) -> None:
    from scheduler import tasks

    transaction.on_commit(lambda: tasks.run_stop_dispatch(workload_id, allocation_id))


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
