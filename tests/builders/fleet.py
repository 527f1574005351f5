"""Small fleets for tests, made through the services."""

from __future__ import annotations

from events import store
from events.store import Metadata
from inventory import events as ev
from inventory import services
from inventory.lifecycle import NodeState
from inventory.models import Cluster, GpuModel, Node
from tenants.access import Actor

OPERATOR = Actor.system_actor("tests")


def cluster(slug: str = "fra1") -> Cluster:
    region = services.region_define(actor=OPERATOR, slug="eu", name="Europe")
    return services.cluster_define(actor=OPERATOR, region=region, slug=slug, name=slug)


def h100() -> GpuModel:
    return services.gpu_model_define(
        actor=OPERATOR,
        slug="h100",
        name="H100 SXM",
        vendor="NVIDIA",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=False,
    )


def node(
    in_cluster: Cluster, name: str = "n1", gpus: int = 8, rack: str | None = "r1"
) -> tuple[Node, str]:
    """A registered node with its agent token."""
    model = h100()
    rack_row = services.rack_define(actor=OPERATOR, cluster=in_cluster, name=rack) if rack else None
    registered, token = services.node_register(
        actor=OPERATOR,
        cluster=in_cluster,
        name=name,
        gpu_model=model,
        cpu_milli=96_000,
        memory_mib=1_048_576,
        gpus=[services.GpuSlot(index=i) for i in range(gpus)],
        rack=rack_row,
    )
    assert token is not None
    return registered, token


def put_in_state(target: Node, state: NodeState) -> Node:
    """Test set-up: record a state change outside the lifecycle table, as an event."""
    fresh = Node.objects.get(pk=target.pk)
    store.append(
        ev.NODE_STREAM,
        str(fresh.pk),
        [
            ev.NodeStateChanged(
                action="test_setup",
                from_state=fresh.state,
                to_state=state.value,
                reason="test set-up",
            )
        ],
        expected_version=fresh.version,
        metadata=Metadata(actor="system:tests"),
    )
    return Node.objects.get(pk=target.pk)
