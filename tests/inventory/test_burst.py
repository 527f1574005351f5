"""Provisioning a whole fleet at once, on PostgreSQL with real commits: every node's steps
run concurrently in threads, as a worker's processes run them."""

from __future__ import annotations

from functools import partial

import pytest
from pytest_django.fixtures import Settings

from inventory import services
from inventory.lifecycle import NodeState
from inventory.models import Node
from tests.builders import run
from tests.concurrency import at_once
from tests.inventory.conftest import Fleet

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("eager_tasks"),
]


@pytest.fixture(autouse=True)
def _fast(settings: Settings) -> None:
    settings.SIMULATED_STEP_DELAY_S = 0
    settings.SIMULATED_FAULTS = {}
    settings.PROVISIONING_RETRY_BASE_S = 0.0


def test_twenty_nodes_provisioned_at_once_all_become_ready(fleet: Fleet) -> None:
    racks = [run(services.rack_define, cluster=fleet.cluster, name=f"r{i}") for i in range(4)]
    nodes = [
        run(
            services.node_register,
            cluster=fleet.cluster,
            name=f"n{i:02d}",
            gpu_model=fleet.gpu_model,
            cpu_milli=96_000,
            memory_mib=1_048_576,
            gpus=[services.GpuSlot(index=g) for g in range(8)],
            rack=racks[i % 4],
        )[0]
        for i in range(20)
    ]

    errors = at_once([partial(run, services.node_provision, node=node) for node in nodes])

    assert [str(e) for e in errors] == []
    assert sorted(Node.objects.values_list("state", flat=True)) == [NodeState.READY] * 20
