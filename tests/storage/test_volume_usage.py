"""A volume's usage as its agents measure it: the heartbeat's ``volumes`` set ``used_bytes``
(an event only when it changed by more than 1 % or crossed the size), and new work that mounts
a volume measured past its size is refused (409 volume_full)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from events.models import Event
from inventory import services as inventory
from inventory.models import Node
from storage.models import Volume
from tests.builders import Builder, run
from tests.scheduler.conftest import Tenant, ready_fleet
from tests.storage.conftest import disk, owner_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

GB = 10**9


@pytest.fixture
def nodes(settings: Any) -> list[Node]:
    settings.VOLUME_SHARED_PATHS = {"fra1": "/srv/shared"}
    fleet = ready_fleet(nodes=2, gpus=8)
    for node in fleet.nodes:
        disk(node, 500)
    return list(fleet.nodes)


@pytest.fixture
def client(build: Builder, tenant: Tenant, in_process: None, nodes: list[Node]) -> Any:
    return owner_client(build, tenant)


def _create(client: Any, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    body = {"project": str(tenant.project.pk), "name": "data", "size_gb": 10, "cluster": "fra1"}
    created = client.post("/api/v1/volumes", body | {"type": "shared"} | fields, format="json")
    assert created.status_code == 201, created.json()
    return dict(created.json())


def _heartbeat(node: Node, volumes: list[dict[str, Any]]) -> Any:
    _, token = run(inventory.node_token_rotate, node=node)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    return agent.post(f"/api/v1/nodes/{node.pk}/heartbeat", {"volumes": volumes}, format="json")


def _measures(volume_id: str) -> list[int]:
    found = Event.objects.filter(
        stream_type="volume", stream_id=volume_id, type="storage.VolumeUsageMeasured"
    )
    return [e.data["used_bytes"] for e in found.order_by("position")]


def _submit(client: Any, tenant: Tenant, volume_id: str) -> Any:
    workload = {
        "project": str(tenant.project.pk),
        "name": "train",
        "gpu_models": ["h100"],
        "command": ["true"],
        "volumes": [{"volume": volume_id, "path": "/mnt/data"}],
    }
    return client.post("/api/v1/workloads", workload, format="json")


def test_a_measure_sets_used_bytes_and_small_changes_add_no_event(
    client: Any, tenant: Tenant, nodes: list[Node]
) -> None:
    volume = _create(client, tenant)

    for used in (4 * GB, 4 * GB + GB // 200, 5 * GB):  # the second is 0.5 % more
        assert _heartbeat(nodes[0], [{"id": volume["id"], "used_bytes": used}]).status_code == 200

    assert _measures(volume["id"]) == [4 * GB, 5 * GB]
    assert Volume.objects.get(pk=volume["id"]).used_bytes == 5 * GB
    assert client.get(f"/api/v1/volumes/{volume['id']}").json()["used_bytes"] == 5 * GB


def test_new_work_mounting_a_volume_measured_past_its_size_is_refused(
    client: Any, tenant: Tenant, nodes: list[Node]
) -> None:
    volume = _create(client, tenant)
    assert _submit(client, tenant, volume["id"]).status_code == 201

    _heartbeat(nodes[1], [{"id": volume["id"], "used_bytes": 10 * GB + 1}])
    refused = _submit(client, tenant, volume["id"])

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "volume_full"
    assert _measures(volume["id"]) == [10 * GB + 1]

    _heartbeat(nodes[1], [{"id": volume["id"], "used_bytes": 10 * GB}])  # crosses back: 0 %
    assert _measures(volume["id"]) == [10 * GB + 1, 10 * GB]
    assert _submit(client, tenant, volume["id"]).status_code == 201


def test_a_local_volume_is_measured_only_by_its_node(
    client: Any, tenant: Tenant, nodes: list[Node]
) -> None:
    volume = _create(client, tenant, type="local", size_gb=100)

    _heartbeat(nodes[0], [{"id": volume["id"], "used_bytes": GB}])  # not placed anywhere

    assert _measures(volume["id"]) == []
    assert Volume.objects.get(pk=volume["id"]).used_bytes is None


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"id": "not-a-uuid", "used_bytes": 1}, id="id"),
        pytest.param({"id": "00000000-0000-0000-0000-000000000001", "used_bytes": -1}, id="neg"),
        pytest.param({"id": "00000000-0000-0000-0000-000000000001"}, id="no-bytes"),
    ],
)
def test_a_bad_measure_is_a_400_on_volumes(
    client: Any, tenant: Tenant, nodes: list[Node], entry: dict[str, Any]
) -> None:
    volume = _create(client, tenant)
    answer = _heartbeat(nodes[0], [entry, {"id": volume["id"], "used_bytes": GB}])

    assert answer.status_code == 400
    assert "volumes" in answer.json()["error"]["fields"]
    assert _measures(volume["id"]) == []
