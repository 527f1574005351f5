"""Free capacity against schedulable capacity: the engine's count of whole shapes that fit,
the selector on a real fleet (failed GPUs, failed and cordoned nodes left out), bounded
queries, and the tick's samples (one set per interval, old ones deleted)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings

from inventory import services as inventory
from inventory.lifecycle import NodeAction, NodeState
from scheduler import services, tasks
from scheduler.engine.fragmentation import Shape, shape_fits, startable
from scheduler.models import Allocation, FragmentationSample
from scheduler.selectors.fragmentation import ModelCapacity, fleet_fragmentation
from tests.builders import run
from tests.builders.fleet import node as fleet_node
from tests.builders.fleet import put_in_state
from tests.scheduler.conftest import GpuFleet, Tenant, job, ready_fleet

# shape label -> (could start now, would hold if together, free but unschedulable)
Figures = dict[str, tuple[int, int, int]]


def _figures(found: ModelCapacity) -> Figures:
    return {f.shape.label: (f.startable, f.would_hold, f.stranded) for f in found.shapes}


@pytest.mark.parametrize(
    ("free_by_node", "expected"),
    [
        pytest.param(
            [5, 5, 5, 5],
            {
                "1": (20, 20, 0),
                "2": (8, 10, 4),
                "4": (4, 5, 4),
                "8": (0, 2, 20),
                "2x8": (0, 1, 20),
                "4x8": (0, 0, 20),
            },
            id="four-nodes-with-five-free-each",
        ),
        pytest.param(
            [8, 8, 8, 0],
            {
                "1": (24, 24, 0),
                "2": (12, 12, 0),
                "4": (6, 6, 0),
                "8": (3, 3, 0),
                "2x8": (1, 1, 8),
                "4x8": (0, 0, 24),
            },
            id="three-whole-nodes",
        ),
        pytest.param(
            [],
            {label: (0, 0, 0) for label in ("1", "2", "4", "8", "2x8", "4x8")},
            id="no-schedulable-node",
        ),
    ],
)
def test_shapes_count_whole_copies_per_node_against_the_free_gpus_together(
    free_by_node: list[int], expected: Figures
) -> None:
    fits = shape_fits(free_by_node)
    assert {f.shape.label: (f.startable, f.would_hold, f.stranded) for f in fits} == expected


@pytest.mark.parametrize(
    ("free_by_node", "shape", "copies"),
    [
        pytest.param([16, 0], Shape(8, nodes=2), 0, id="a-gang-needs-distinct-nodes"),
        pytest.param([16, 8, 8], Shape(8, nodes=2), 2, id="a-big-node-serves-two-gangs"),
        pytest.param([24, 8], Shape(8, nodes=2), 1, id="one-small-node-bounds-the-gangs"),
        pytest.param([3, 3, 2], Shape(2), 3, id="odd-gpus-left-on-each-node"),
    ],
)
def test_gangs_take_their_parts_from_distinct_nodes(
    free_by_node: list[int], shape: Shape, copies: int
) -> None:
    assert startable(free_by_node, shape) == copies


def _three_used_on_each(tenant: Tenant) -> GpuFleet:
    """4 ready nodes x 8 GPUs, a gang holding 3 GPUs on each: 20 free, 5 per node."""
    fleet = ready_fleet(nodes=4, gpus=8)
    run(
        services.workload_submit,
        project=tenant.project,
        spec=job("spread", gpus=3, nodes=4, runtime_estimate_s=3600),
    )
    (allocation,) = Allocation.objects.filter(released_at__isnull=True)
    assert sorted(len(p["gpus"]) for p in allocation.placements) == [3, 3, 3, 3]
    return fleet


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_fleet_with_three_gpus_used_on_each_node(tenant: Tenant, in_process: None) -> None:
    fleet = _three_used_on_each(tenant)

    (h100,) = fleet_fragmentation()

    assert (h100.cluster, h100.gpu_model) == (fleet.cluster.slug, "h100")
    assert (h100.total, h100.healthy, h100.allocated, h100.free) == (32, 32, 12.0, 20)
    assert _figures(h100) == {
        "1": (20, 20, 0),
        "2": (8, 10, 4),
        "4": (4, 5, 4),
        "8": (0, 2, 20),
        "2x8": (0, 1, 20),
        "4x8": (0, 0, 20),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_failed_gpus_failed_and_cordoned_nodes_are_not_schedulable(
    tenant: Tenant, in_process: None
) -> None:
    fleet = _three_used_on_each(tenant)
    (allocation,) = Allocation.objects.filter(released_at__isnull=True)
    first, second = fleet.nodes[0], fleet.nodes[1]
    held = next(p["gpus"] for p in allocation.placements if p["node_id"] == str(first.pk))
    idle = min(set(range(8)) - set(held))
    run(
        inventory.node_heartbeat,
        node=first,
        gpus=[inventory.GpuHealth(index=idle, healthy=False, reason="xid 79")],
    )
    run(inventory.node_transition, node=second, action=NodeAction.CORDON)
    with transaction.atomic():
        spare, _ = fleet_node(fleet.cluster, "spare", rack=None)
    put_in_state(spare, NodeState.FAILED)

    (h100,) = fleet_fragmentation()

    # The spare's 8 count in total, not healthy; the cordoned node's 5 free are not free.
    assert (h100.total, h100.healthy, h100.allocated, h100.free) == (40, 31, 12.0, 14)
    assert _figures(h100) == {
        "1": (14, 14, 0),
        "2": (6, 7, 2),
        "4": (3, 3, 2),
        "8": (0, 1, 14),
        "2x8": (0, 0, 14),
        "4x8": (0, 0, 14),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_the_queries_do_not_grow_with_the_fleet() -> None:
    fleet = ready_fleet(nodes=2)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            fleet_fragmentation()
        return len(captured)

    small = queries()
    for i in range(10):
        with transaction.atomic():
            more, _ = fleet_node(fleet.cluster, f"more{i}", rack=None)
        put_in_state(more, NodeState.READY)
    large = queries()

    (h100,) = fleet_fragmentation()
    assert (h100.total, h100.free) == (96, 96)
    assert large == small


START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_one_sample_set_per_interval_and_old_samples_deleted(
    settings: Settings, tenant: Tenant, in_process: None
) -> None:
    settings.FRAGMENTATION_SAMPLE_S = 300
    settings.FRAGMENTATION_RETENTION_DAYS = 30
    fleet = _three_used_on_each(tenant)
    FragmentationSample.objects.all().delete()  # what the set-up's ticks may have taken
    old = FragmentationSample.objects.create(
        cluster_id=fleet.cluster.pk,
        gpu_model="h100",
        shape="1",
        startable=1,
        would_hold=1,
        free=1,
        at=START - timedelta(days=30, seconds=1),
    )
    kept = FragmentationSample.objects.create(
        cluster_id=fleet.cluster.pk,
        gpu_model="h100",
        shape="1",
        startable=1,
        would_hold=1,
        free=1,
        at=START - timedelta(days=29),
    )

    assert services.fragmentation_sample(now=START + timedelta(seconds=10)) == 6
    assert services.fragmentation_sample(now=START + timedelta(seconds=299)) == 0
    assert services.fragmentation_sample(now=START + timedelta(seconds=300)) == 6

    samples = FragmentationSample.objects.exclude(pk=kept.pk)
    assert not FragmentationSample.objects.filter(pk=old.pk).exists()
    assert FragmentationSample.objects.filter(pk=kept.pk).exists()
    assert sorted(samples.values_list("at", flat=True).distinct()) == [
        START,
        START + timedelta(seconds=300),
    ]
    two = {
        (s.shape, s.startable, s.would_hold, s.free)
        for s in samples.filter(at=START + timedelta(seconds=300))
    }
    assert two == {
        ("1", 20, 20, 20),
        ("2", 8, 10, 20),
        ("4", 4, 5, 20),
        ("8", 0, 2, 20),
        ("2x8", 0, 1, 20),
        ("4x8", 0, 0, 20),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_beats_tick_takes_the_sample(settings: Settings, in_process: None) -> None:
    settings.FRAGMENTATION_SAMPLE_S = 3600
    ready_fleet(nodes=1)
    FragmentationSample.objects.all().delete()

    tasks.tick()
    tasks.tick()

    assert FragmentationSample.objects.count() == 6
    assert set(FragmentationSample.objects.values_list("shape", "startable")) == {
        ("1", 8),
        ("2", 4),
        ("4", 2),
        ("8", 1),
        ("2x8", 0),
        ("4x8", 0),
    }
