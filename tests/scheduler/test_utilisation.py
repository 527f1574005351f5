"""Allocation is not utilisation: a running workload shows what its GPUs last reported, and
is flagged idle once every one of them has been idle longer than GPU_IDLE_FLAG_AFTER_S."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django.fixtures import Settings

from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Cluster, Node
from scheduler import selectors
from scheduler.models import Allocation, Workload
from tenants.models import Project
from tests.builders import Builder, client_with_key, run
from tests.builders.fleet import cluster, node, put_in_state
from tests.builders.history import SchedulingLog

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(hours=2)


@dataclass
class World:
    fleet: Cluster
    nodes: list[Node]
    project: Project
    key: str
    log: SchedulingLog


@pytest.fixture
def world(build: Builder) -> World:
    fleet = cluster()
    nodes = [put_in_state(node(fleet, f"n{i}", gpus=2)[0], NodeState.READY) for i in range(2)]
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    project = build.project(organization)
    return World(
        fleet=fleet,
        nodes=nodes,
        project=project,
        key=build.key(organization, owner)[1],
        log=SchedulingLog(project=project, cluster_id=fleet.pk),
    )


def running(world: World, nodes: list[Node], *, started: bool = True) -> uuid.UUID:
    """A workload holding both GPUs of each of ``nodes`` (running unless not ``started``)."""
    workload = world.log.submit(START)
    allocation = world.log.grant(
        workload, START, [(2, 1000)] * len(nodes), nodes=[n.pk for n in nodes]
    )
    if started:
        world.log.running(workload, allocation, START)
    return workload


def report(target: Node, utilisations: list[float], at: datetime, memory: int = 1024) -> None:
    run(
        inventory.node_heartbeat,
        node=target,
        now=at,
        gpus=[
            inventory.GpuHealth(index=i, healthy=True, utilization_pct=u, memory_used_mib=memory)
            for i, u in enumerate(utilisations)
        ],
    )


def utilisation(workload: uuid.UUID, now: datetime) -> selectors.Utilisation | None:
    shown = Workload.objects.get(pk=workload)
    allocations = {a.pk: a for a in Allocation.objects.filter(workload=shown)}
    return selectors.workloads_utilisation([shown], allocations, now=now).get(shown.pk)


def test_the_mean_of_its_gpus_and_their_memory(world: World) -> None:
    workload = running(world, world.nodes)
    report(world.nodes[0], [10.0, 30.0], START, memory=1000)
    report(world.nodes[1], [50.0, 70.0], START + timedelta(seconds=5), memory=500)

    used = utilisation(workload, START + timedelta(seconds=10))

    assert used == selectors.Utilisation(
        gpus=4,
        utilization_pct=40.0,
        memory_used_mib=3000,
        idle=False,
        idle_since=None,
        telemetry_at=START,
    )


def test_idle_only_after_the_configured_time(world: World, settings: Settings) -> None:
    settings.GPU_IDLE_FLAG_AFTER_S = 600
    workload = running(world, world.nodes[:1])
    report(world.nodes[0], [1.0, 0.0], START)
    report(world.nodes[0], [2.0, 0.0], START + timedelta(seconds=300))

    early = utilisation(workload, START + timedelta(seconds=600))
    late = utilisation(workload, START + timedelta(seconds=601))

    assert early is not None
    assert late is not None
    assert (early.idle, early.idle_since) == (False, START)
    assert (late.idle, late.idle_since) == (True, START)


def test_not_idle_while_one_gpu_is_busy(world: World) -> None:
    workload = running(world, world.nodes)
    report(world.nodes[0], [0.0, 0.0], START)
    report(world.nodes[1], [0.0, 95.0], START)

    used = utilisation(workload, START + timedelta(hours=1))

    assert used is not None
    assert (used.idle, used.idle_since) == (False, None)


def test_none_without_telemetry_or_when_not_running(world: World) -> None:
    silent = running(world, world.nodes[:1])
    waiting = running(world, world.nodes[1:], started=False)
    report(world.nodes[1], [0.0, 0.0], START)

    assert utilisation(silent, START) is None
    assert utilisation(waiting, START) is None


def test_the_workload_api_shows_it_without_a_query_per_workload(world: World) -> None:
    client = client_with_key(world.key)
    busy = running(world, world.nodes[:1])
    report(world.nodes[0], [60.0, 80.0], timezone.now())
    client.get("/api/v1/me")  # the key's first use is recorded once
    with CaptureQueriesContext(connection) as one:
        first = client.get("/api/v1/workloads")
    for _ in range(3):
        running(world, world.nodes[1:])
    running(world, world.nodes[1:], started=False)
    report(world.nodes[1], [0.0, 0.0], timezone.now() - timedelta(hours=1))
    with CaptureQueriesContext(connection) as many:
        listed = client.get("/api/v1/workloads")

    assert first.status_code == listed.status_code == 200
    assert len(many) == len(one)
    shown = {w["id"]: w["utilisation"] for w in listed.json()["results"]}
    assert len(shown) == 5
    assert shown[str(busy)]["utilization_pct"] == 70.0
    assert shown[str(busy)]["gpus"] == 2
    assert shown[str(busy)]["idle"] is False
    idle = [u for u in shown.values() if u and u["idle"]]
    assert len(idle) == 3
    assert [u for u in shown.values() if u is None] == [None]
    detail = client.get(f"/api/v1/workloads/{busy}").json()
    assert detail["utilisation"] == shown[str(busy)]
