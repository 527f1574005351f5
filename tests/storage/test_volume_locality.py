"""A local volume through the real scheduling path: its first run decides its node (an event),
the next run that mounts it goes there, and waits there (``volume_locality``) while that node
is full though another has room."""

from __future__ import annotations

import pytest

from events.models import Event
from inventory.models import Node
from scheduler import services, tasks
from scheduler.models import Allocation, Workload, WorkloadWait
from scheduler.services.what_if import duration_in_words
from scheduler.specs import VolumeMount
from storage import services as storage
from storage.models import Volume
from tests.builders import run
from tests.scheduler.conftest import Tenant, job, ready_fleet
from tests.storage.conftest import disk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _submit(tenant: Tenant, name: str, gpus: int, volume: Volume | None = None) -> Workload:
    mounts = (VolumeMount(volume=volume.pk, path="/mnt/data"),) if volume else ()
    spec = job(name, gpus=gpus, runtime_estimate_s=3600, volumes=mounts)
    workload: Workload = run(services.workload_submit, project=tenant.project, spec=spec)
    return Workload.objects.get(pk=workload.pk)


def _node_of(workload: Workload) -> str:
    allocation = Allocation.objects.get(workload=workload, released_at__isnull=True)
    return str(allocation.placements[0]["node_id"])


def test_the_next_run_mounting_a_local_volume_goes_to_its_node(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    for node in fleet.nodes:
        disk(node, 500)
    volume = run(
        storage.volume_create,
        project=tenant.project,
        name="data",
        size_gb=100,
        cluster=fleet.cluster.slug,
        type="local",
    )

    first = _submit(tenant, "writer", 1, volume)
    assert first.status == "running"
    placed = Volume.objects.get(pk=volume.pk)
    assert str(placed.node_id) == _node_of(first)
    assert Event.objects.filter(type="storage.VolumePlaced").count() == 1

    # Fill the volume's node; the other has all its GPUs free.
    filler = _submit(tenant, "filler", 7)
    assert _node_of(filler) == str(placed.node_id)
    second = _submit(tenant, "reader", 2, volume)

    assert second.status in {"pending", "admitted"}
    wait = WorkloadWait.objects.get(workload_id=second.pk)
    assert wait.code == "volume_locality", wait.message
    assert wait.figures["nodes"] == [str(placed.node_id)]
    node_name = Node.objects.get(pk=str(placed.node_id)).name
    assert wait.message.startswith(f"waits for {node_name}, where its volume's data lives")
    assert str(placed.node_id) not in wait.message

    # The what-if says both: on its node later, elsewhere (without the volume) now.
    mounts = (VolumeMount(volume=volume.pk, path="/mnt/data"),)
    spec = job("next", gpus=2, runtime_estimate_s=600, volumes=mounts)
    answer = run(services.workload_estimate, project=tenant.project, spec=spec)
    assert answer.locality is not None
    assert (answer.locality.node, answer.locality.starts_now) == (node_name, False)
    assert answer.locality.elsewhere_starts_now
    assert answer.locality.wait_s == answer.as_asked.wait_s
    words = services.estimates_in_words(answer)
    assert words.endswith(
        f"on {node_name} in about {duration_in_words(answer.locality.wait_s or 0)},"
        " or elsewhere without your volume now"
    ), words

    run(services.workload_cancel, workload=filler, reason="make room")
    tasks.tick()
    assert _node_of(Workload.objects.get(pk=second.pk)) == str(placed.node_id)
