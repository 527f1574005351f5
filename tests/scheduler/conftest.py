"""Fixtures of the scheduling service: a ready fleet, a tenant, and tasks in process."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Cluster, Node
from neocloud.celery import app as celery_app
from scheduler import scheduling, services, triggers
from scheduler.models import Workload
from scheduler.specs import WorkloadSpec
from tenants import services as tenant_services
from tenants.models import Organization, Project
from tests.builders import Builder, run
from tests.builders.commerce import gpu_model
from tests.builders.fleet import put_in_state


@dataclass
class GpuFleet:
    cluster: Cluster
    nodes: list[Node]


def ready_fleet(nodes: int = 2, gpus: int = 8, slug: str = "fra1") -> GpuFleet:
    """``nodes`` ready H100 nodes of ``gpus`` GPUs, two racks, one NVLink domain each."""
    region = run(inventory.region_define, slug="eu", name="Europe")
    cluster = run(inventory.cluster_define, region=region, slug=slug, name=slug)
    model = run(
        inventory.gpu_model_define,
        slug="h100",
        name="H100 SXM",
        vendor="NVIDIA",
        memory_gib=80,
        interconnect="nvswitch",
        shareable=False,
    )
    made = []
    for i in range(nodes):
        rack = run(inventory.rack_define, cluster=cluster, name=f"r{i % 2}")
        node, _ = run(
            inventory.node_register,
            cluster=cluster,
            name=f"{slug}-n{i:02d}",
            gpu_model=model,
            cpu_milli=128_000,
            memory_mib=1_048_576,
            gpus=[inventory.GpuSlot(index=g) for g in range(gpus)],
            rack=rack,
        )
        made.append(put_in_state(node, NodeState.READY))
    return GpuFleet(cluster=cluster, nodes=made)


def quota(tenant: Tenant, max_gpus: int, gpu_model: str = "h100") -> None:
    """The tenant's project may hold at most ``max_gpus`` of ``gpu_model``."""
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=tenant.project,
        gpu_model=gpu_model,
        max_gpus=max_gpus,
    )


def model_node(fleet: GpuFleet, slug: str, gpus: int = 4, **fields: Any) -> Node:
    """A ready node of a new GPU model ``slug`` in the fleet's cluster."""
    node, _ = run(
        inventory.node_register,
        cluster=fleet.cluster,
        name=f"{fleet.cluster.slug}-{slug}",
        gpu_model=gpu_model(slug),
        cpu_milli=fields.pop("cpu_milli", 128_000),
        memory_mib=fields.pop("memory_mib", 1_048_576),
        gpus=[inventory.GpuSlot(index=g) for g in range(gpus)],
        **fields,
    )
    return put_in_state(node, NodeState.READY)


@dataclass
class Tenant:
    organization: Organization
    project: Project


@pytest.fixture
def tenant(build: Builder) -> Tenant:
    organization = build.organization("Acme")
    return Tenant(organization=organization, project=build.project(organization, "Training"))


@pytest.fixture
def in_process() -> Iterator[None]:
    """Tasks run in the calling process, as in the embedded default; no state carried
    between tests."""
    conf = celery_app.conf
    saved = conf.task_always_eager, conf.task_eager_propagates
    conf.task_always_eager, conf.task_eager_propagates = True, True
    scheduling.forget()
    yield
    scheduling.forget()
    conf.task_always_eager, conf.task_eager_propagates = saved


@pytest.fixture
def no_triggers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cycles only where the test runs them; no runs started or stopped."""
    for name in ("cycle_wanted", "runs_start", "run_stop", "drain_check"):
        monkeypatch.setattr(triggers, name, lambda *args, **kwargs: None)
    scheduling.forget()
    yield
    scheduling.forget()


def job(name: str = "train", gpus: int = 1, nodes: int = 1, **fields: object) -> WorkloadSpec:
    return WorkloadSpec(
        name=name,
        gpu_models=("h100",),
        gpus_per_node=gpus,
        nodes=nodes,
        runtime_estimate_s=fields.pop("runtime_estimate_s", 0.2),  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


def submitted(project: Project, name: str = "train", **fields: Any) -> Workload:
    """A ``job`` submitted through the service, as its row stands after (its cycle ran)."""
    workload: Workload = run(services.workload_submit, project=project, spec=job(name, **fields))
    return Workload.objects.get(pk=workload.pk)
