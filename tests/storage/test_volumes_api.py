"""Volumes through the API: create, list, get, delete (refused while a workload mounts it),
the storage quota, bad input as a 400 with its field and nothing written, and a replay that
rebuilds the table as it was."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

from events.models import Event
from inventory.models import Node
from scheduler import services as scheduler
from scheduler.models import Workload
from storage import services as storage
from storage.models import Volume
from tests.builders import Builder, run
from tests.scheduler.conftest import Tenant, ready_fleet
from tests.storage.conftest import disk, owner_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

URL = "/api/v1/volumes"


def _volume(tenant: Tenant, **fields: Any) -> dict[str, Any]:
    return {
        "project": str(tenant.project.pk),
        "name": "data",
        "size_gb": 100,
        "cluster": "fra1",
        "type": "local",
        **fields,
    }


def _workload(tenant: Tenant, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "project": str(tenant.project.pk),
        "name": "train",
        "gpu_models": ["h100"],
        "command": ["true"],
        "volumes": volumes,
    }


def _place(volume_id: str, node: Node | None) -> None:
    """As the scheduler does when it grants the first run that mounts the volume."""
    assert node is not None
    with transaction.atomic():
        storage.volume_place(volume_id=uuid.UUID(volume_id), node_id=node.pk)


def _volume_events() -> int:
    return Event.objects.filter(stream_type="volume").count()


@pytest.fixture
def client(build: Builder, tenant: Tenant, in_process: None) -> Any:
    fleet = ready_fleet(nodes=2, gpus=8)
    for node in fleet.nodes:
        disk(node, 500)
    return owner_client(build, tenant)


def test_a_volume_is_created_listed_read_and_deleted(client: Any, tenant: Tenant) -> None:
    created = client.post(URL, _volume(tenant), format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["name"], body["size_gb"], body["type"], body["status"]) == (
        "data",
        100,
        "local",
        "active",
    )
    assert body["node_id"] is None
    assert [v["id"] for v in client.get(URL).json()["results"]] == [body["id"]]
    assert client.get(f"{URL}/{body['id']}").json()["name"] == "data"

    assert client.delete(f"{URL}/{body['id']}").status_code == 204
    assert Volume.objects.get(pk=body["id"]).status == "deleted"
    types = list(Event.objects.filter(stream_type="volume").values_list("type", flat=True))
    assert types == ["storage.VolumeCreated", "storage.VolumeDeleted"]


def test_a_volume_a_workload_mounts_is_not_deleted_until_it_ends(
    client: Any, tenant: Tenant
) -> None:
    volume = client.post(URL, _volume(tenant), format="json").json()
    submitted = client.post(
        "/api/v1/workloads",
        _workload(tenant, [{"volume": volume["id"], "path": "/mnt/data"}]),
        format="json",
    )
    assert submitted.status_code == 201, submitted.json()
    assert submitted.json()["volumes"] == [
        {"volume": volume["id"], "path": "/mnt/data", "read_only": False}
    ]

    refused = client.delete(f"{URL}/{volume['id']}")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "volume_in_use"
    assert Volume.objects.get(pk=volume["id"]).status == "active"

    run(
        scheduler.workload_cancel,
        workload=Workload.objects.get(pk=submitted.json()["id"]),
        reason="done",
    )
    assert client.delete(f"{URL}/{volume['id']}").status_code == 204


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param({"size_gb": 0}, "size_gb", id="size-0"),
        pytest.param({"type": "nfs"}, "type", id="unknown-type"),
        pytest.param({"type": "shared"}, "type", id="shared-without-a-shared-filesystem"),
        pytest.param({"cluster": "nowhere"}, "cluster", id="unknown-cluster"),
        pytest.param({"size_gb": 501}, "size_gb", id="local-on-a-full-node"),
    ],
)
def test_a_bad_volume_is_a_400_with_its_field_and_nothing_written(
    client: Any, tenant: Tenant, fields: dict[str, Any], field: str
) -> None:
    response = client.post(URL, _volume(tenant, **fields), format="json")

    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]
    assert _volume_events() == 0
    assert not Volume.objects.exists()


def test_a_local_volume_finds_no_room_where_placed_volumes_use_it(
    client: Any, tenant: Tenant
) -> None:
    """Each node offers 500 GB: two placed 300 GB volumes leave 200 GB on each."""
    for node in Node.objects.all():
        made = client.post(URL, _volume(tenant, name=f"v-{node.name}", size_gb=300), format="json")
        _place(made.json()["id"], node)

    refused = client.post(URL, _volume(tenant, name="big", size_gb=201), format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "node_disk_full"
    assert (
        client.post(URL, _volume(tenant, name="fits", size_gb=200), format="json").status_code
        == 201
    )


def test_past_the_storage_quota_a_volume_is_refused(
    client: Any, tenant: Tenant, settings: Any
) -> None:
    settings.VOLUME_GB_PER_ORGANIZATION = 150
    assert client.post(URL, _volume(tenant), format="json").status_code == 201

    refused = client.post(URL, _volume(tenant, name="more", size_gb=51), format="json")

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "storage_quota_exceeded"
    assert refused.json()["error"]["details"] == {"provisioned_gb": 100, "quota_gb": 150}
    assert _volume_events() == 1


def test_a_name_is_one_volume_of_a_project(client: Any, tenant: Tenant) -> None:
    assert client.post(URL, _volume(tenant), format="json").status_code == 201
    taken = client.post(URL, _volume(tenant), format="json")
    assert taken.status_code == 409
    assert taken.json()["error"]["fields"] == {"name": ["taken"]}


@pytest.mark.parametrize(
    "mounts",
    [
        pytest.param([{"path": "/data"}], id="outside-the-runs-mnt"),
        pytest.param([{"path": "/mnt"}], id="the-mount-root-itself"),
        pytest.param([{"path": "/etc/x"}], id="a-system-directory"),
        pytest.param([{"path": "/mnt/../etc"}], id="not-normal"),
        pytest.param([{"path": "mnt/data"}], id="relative"),
        pytest.param([{"path": "/mnt/a"}, {"path": "/mnt/a"}], id="two-on-one-path"),
        pytest.param([{"path": "/mnt/a"}, {"path": "/mnt/a/b"}], id="one-inside-another"),
        pytest.param([{"path": "/mnt/a", "volume": "unknown"}], id="not-the-projects"),
    ],
)
def test_bad_mounts_are_a_400_on_volumes_and_nothing_is_submitted(
    client: Any, build: Builder, tenant: Tenant, mounts: list[dict[str, Any]]
) -> None:
    ours = [client.post(URL, _volume(tenant, name=f"v{i}"), format="json").json() for i in (0, 1)]
    other_project = build.project(tenant.organization, "Other")
    theirs = client.post(
        URL, _volume(tenant, project=str(other_project.pk), name="theirs"), format="json"
    ).json()
    given = [
        {
            "volume": theirs["id"] if m.get("volume") == "unknown" else ours[i]["id"],
            "path": m["path"],
        }
        for i, m in enumerate(mounts)
    ]

    response = client.post("/api/v1/workloads", _workload(tenant, given), format="json")

    assert response.status_code == 400, response.json()
    assert "volumes" in response.json()["error"]["fields"]
    assert not Workload.objects.exists()


def test_a_replay_rebuilds_the_volumes_as_they_were(client: Any, tenant: Tenant) -> None:
    kept = client.post(URL, _volume(tenant), format="json").json()
    gone = client.post(URL, _volume(tenant, name="gone"), format="json").json()
    _place(kept["id"], Node.objects.first())
    client.delete(f"{URL}/{gone['id']}")

    def rows() -> list[Any]:
        return sorted(Volume.objects.values_list(), key=str)

    live = rows()
    call_command("replay", "storage.volumes", verbosity=0)

    assert rows() == live
    assert len(live) == 2
