"""Volumes' fixtures: the scheduler's tenant and fleet, and a node's disk as its agent says."""

from __future__ import annotations

from typing import Any

from inventory import services as inventory
from inventory.models import Node
from tenants.models import Role
from tests.builders import Builder, client_with_key, run
from tests.scheduler.conftest import Tenant, in_process, tenant

__all__ = ["in_process", "tenant"]


def disk(node: Node, gb: int) -> None:
    """``node``'s agent reports ``gb`` of disk for local volumes (a full heartbeat)."""
    run(
        inventory.node_heartbeat,
        node=node,
        gpus=[inventory.GpuHealth(index=g.index, healthy=True) for g in node.gpus.all()],
        agent=inventory.AgentInfo(version="test", volumes_disk_gb=gb),
    )


def owner_client(build: Builder, tenant: Tenant) -> Any:
    membership = build.member(tenant.organization, Role.OWNER)
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)
