"""Fleet fixtures for the provisioning tests: a region, a cluster, a GPU model, and nodes
registered through the services; helpers that read a node's provisioning from its stream."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from events import store
from events.types import DomainEvent
from inventory import events as ev
from inventory import services
from inventory.models import Cluster, GpuModel, Node
from neocloud.celery import app as celery_app
from tests.builders import run


@dataclass
class Fleet:
    cluster: Cluster
    gpu_model: GpuModel

    def node(self, name: str = "gpu-node-1", gpus: int = 8) -> Node:
        node, _ = run(
            services.node_register,
            cluster=self.cluster,
            name=name,
            gpu_model=self.gpu_model,
            cpu_milli=96_000,
            memory_mib=1_048_576,
            gpus=[services.GpuSlot(index=i, nvlink_domain=0) for i in range(gpus)],
        )
        return node  # type: ignore[no-any-return]


@pytest.fixture
def fleet() -> Fleet:
    region = run(services.region_define, slug="eu-west", name="EU West")
    cluster = run(services.cluster_define, region=region, slug="eu-west-1", name="EU West 1")
    gpu_model = run(
        services.gpu_model_define,
        slug="h100-sxm",
        name="NVIDIA H100 SXM",
        vendor="nvidia",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=False,
    )
    return Fleet(cluster=cluster, gpu_model=gpu_model)


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Celery tasks run in the calling process, their exceptions raised to the caller."""
    conf = celery_app.conf
    saved = conf.task_always_eager, conf.task_eager_propagates
    conf.task_always_eager, conf.task_eager_propagates = True, True
    yield
    conf.task_always_eager, conf.task_eager_propagates = saved


def provisioning_events(node: Node, event_type: type[DomainEvent]) -> list[dict[str, Any]]:
    """The payloads of the node's events of one type, in stream order."""
    return [
        event.data
        for event in store.read_stream(ev.NODE_STREAM, str(node.pk))
        if event.type == event_type.event_type
    ]


def steps_of(node: Node, event_type: type[DomainEvent], **where: Any) -> list[tuple[str, int]]:
    """(step, attempt) of the node's step events of one type matching ``where``."""
    return [
        (data["step"], data["attempt"])
        for data in provisioning_events(node, event_type)
        if all(data[key] == value for key, value in where.items())
    ]


def state_of(node: Node) -> str:
    return Node.objects.values_list("state", flat=True).get(pk=node.pk)
