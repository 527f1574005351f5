"""Fleet endpoints: operator permissions, lifecycle actions, heartbeats, capacity."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from events import store
from inventory import services
from inventory.lifecycle import NodeAction, NodeState
from inventory.models import Cluster, Gpu, Node
from tenants.models import Scope
from tests.builders import Builder, client_with_key
from tests.builders.fleet import OPERATOR, cluster, node, put_in_state

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet() -> Cluster:
    return cluster()


@pytest.fixture
def keys(build: Builder) -> dict[str, str]:
    operator = build.user("ops@neocloud.example", is_staff=True)
    ops_org = build.organization("Operators", owner=operator)
    customer = build.user("owner@acme.example")
    acme = build.organization("Acme", owner=customer)
    return {
        "operator": build.key(ops_org, operator)[1],
        "operator_read_key": build.key(ops_org, operator, scopes=[Scope.READ])[1],
        "customer": build.key(acme, customer)[1],
    }


def _heartbeat(node_id: str, token: str | None, body: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    return client.post(f"/api/v1/nodes/{node_id}/heartbeat", body or {}, format="json")


@pytest.mark.parametrize(
    ("persona", "method", "path", "status"),
    [
        ("customer", "get", "/api/v1/gpu-models", 200),
        ("customer", "get", "/api/v1/regions", 200),
        ("customer", "get", "/api/v1/clusters", 403),
        ("customer", "get", "/api/v1/nodes", 403),
        ("customer", "get", "/api/v1/clusters/{cluster}/capacity", 403),
        ("customer", "post", "/api/v1/nodes/{node}/cordon", 403),
        ("operator", "get", "/api/v1/clusters", 200),
        ("operator", "get", "/api/v1/nodes", 200),
        ("operator", "get", "/api/v1/nodes/{node}", 200),
        ("operator", "get", "/api/v1/clusters/{cluster}/topology", 200),
        ("operator", "get", "/api/v1/clusters/{cluster}/capacity", 200),
        ("operator", "post", "/api/v1/nodes/{node}/provision", 200),
        ("operator", "post", "/api/v1/nodes/{node}/token", 200),
        ("operator_read_key", "get", "/api/v1/nodes", 200),
        ("operator_read_key", "post", "/api/v1/nodes/{node}/provision", 403),
        ("anonymous", "get", "/api/v1/gpu-models", 401),
        ("anonymous", "get", "/api/v1/nodes", 401),
    ],
)
def test_fleet_permissions(
    fleet: Cluster, keys: dict[str, str], persona: str, method: str, path: str, status: int
) -> None:
    target, _ = node(fleet)
    client = client_with_key(keys.get(persona))

    response = getattr(client, method)(path.format(cluster=fleet.pk, node=target.pk))

    assert response.status_code == status


def test_an_invalid_transition_is_a_409_that_changes_nothing(
    fleet: Cluster, keys: dict[str, str]
) -> None:
    target, _ = node(fleet)
    version = target.version

    response = client_with_key(keys["operator"]).post(f"/api/v1/nodes/{target.pk}/cordon")

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "invalid_transition"
    assert error["details"]["allowed"] == ["provision", "decommission"]
    assert store.stream_version("node", str(target.pk)) == version


def test_operator_actions_walk_the_lifecycle(fleet: Cluster, keys: dict[str, str]) -> None:
    target = put_in_state(node(fleet)[0], NodeState.READY)
    client = client_with_key(keys["operator"])

    states = [
        client.post(f"/api/v1/nodes/{target.pk}/{action}", {"reason": "r"}, format="json").json()[
            "state"
        ]
        for action in ("cordon", "uncordon", "drain", "uncordon", "drain", "decommission")
    ]

    assert states == ["cordoned", "ready", "maintenance", "ready", "maintenance", "decommissioned"]


def test_a_heartbeat_needs_the_nodes_own_token(fleet: Cluster) -> None:
    first, first_token = node(fleet, "n1")
    second, _ = node(fleet, "n2")

    assert _heartbeat(str(first.pk), first_token).status_code == 200
    assert _heartbeat(str(second.pk), first_token).status_code == 401
    assert _heartbeat(str(first.pk), "forged").status_code == 401
    assert _heartbeat(str(first.pk), None).status_code == 401
    assert _heartbeat("not-a-uuid", first_token).status_code == 401
    assert Node.objects.get(pk=first.pk).last_heartbeat_at is not None
    assert Node.objects.get(pk=second.pk).last_heartbeat_at is None


def test_a_rotated_token_replaces_the_old_one(fleet: Cluster, keys: dict[str, str]) -> None:
    target, old = node(fleet)

    new = client_with_key(keys["operator"]).post(f"/api/v1/nodes/{target.pk}/token").json()["token"]

    assert _heartbeat(str(target.pk), old).status_code == 401
    assert _heartbeat(str(target.pk), new).status_code == 200


def test_a_reported_gpu_fault_fails_the_gpu_by_event(fleet: Cluster) -> None:
    target, token = node(fleet)
    put_in_state(target, NodeState.READY)

    faulty = _heartbeat(
        str(target.pk),
        token,
        {
            "gpus": [
                {"index": 3, "healthy": False, "reason": "XID 79: fallen off the bus"},
                {"index": 4, "healthy": True},
            ]
        },
    )
    again = _heartbeat(str(target.pk), token, {"gpus": [{"index": 3, "healthy": False}]})
    healed = _heartbeat(str(target.pk), token, {"gpus": [{"index": 3, "healthy": True}]})

    assert faulty.status_code == again.status_code == healed.status_code == 200
    types = [e.type for e in store.read_stream("node", str(target.pk))]
    assert types.count("inventory.GpuFailed") == 1
    assert types[-1] == "inventory.GpuRecovered"
    assert Gpu.objects.get(node=target, index=3).healthy


def test_a_heartbeat_for_an_unknown_gpu_is_400(fleet: Cluster) -> None:
    target, token = node(fleet, gpus=2)

    response = _heartbeat(str(target.pk), token, {"gpus": [{"index": 7, "healthy": False}]})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_gpu"


def test_a_heartbeat_from_a_newer_agent_is_read_for_what_the_server_knows(fleet: Cluster) -> None:
    """An agent upgraded before the server may report more; its heartbeat still counts
    (customers' and operators' requests refuse names they do not take, agents' do not)."""
    target, token = node(fleet, gpus=2)
    put_in_state(target, NodeState.READY)

    response = _heartbeat(
        str(target.pk),
        token,
        {"gpus": [{"index": 1, "healthy": False, "temperature_c": 91}], "agent_uptime_s": 5},
    )

    assert response.status_code == 200
    assert not Gpu.objects.get(node=target, index=1).healthy


def test_missed_heartbeats_fail_the_node(fleet: Cluster) -> None:
    quiet, _ = node(fleet, "quiet")
    chatty, chatty_token = node(fleet, "chatty")
    never_ready, _ = node(fleet, "registered-only")
    for target in (quiet, chatty):
        put_in_state(target, NodeState.READY)
    now = timezone.now()
    # The quiet node last spoke two minutes ago (telemetry, written in place).
    Node.objects.filter(pk=quiet.pk).update(last_heartbeat_at=now - timedelta(minutes=2))
    _heartbeat(str(chatty.pk), chatty_token)

    failed = services.heartbeats_check(actor=OPERATOR, threshold=timedelta(seconds=60), now=now)

    assert [n.name for n in failed] == ["quiet"]
    assert Node.objects.get(pk=quiet.pk).state == NodeState.FAILED
    assert Node.objects.get(pk=quiet.pk).state_reason.startswith("heartbeat missed since")
    assert Node.objects.get(pk=chatty.pk).state == NodeState.READY
    assert Node.objects.get(pk=never_ready.pk).state == NodeState.REGISTERED


def test_capacity_counts_total_healthy_and_schedulable(
    fleet: Cluster, keys: dict[str, str]
) -> None:
    ready, token = node(fleet, "ready")
    put_in_state(ready, NodeState.READY)
    _heartbeat(str(ready.pk), token, {"gpus": [{"index": 0, "healthy": False}]})
    cordoned = put_in_state(node(fleet, "cordoned")[0], NodeState.READY)
    services.node_transition(actor=OPERATOR, node=cordoned, action=NodeAction.CORDON)
    put_in_state(node(fleet, "failed")[0], NodeState.FAILED)

    capacity = client_with_key(keys["operator"]).get(f"/api/v1/clusters/{fleet.pk}/capacity").json()

    assert capacity["gpu_models"] == [
        {"gpu_model": "h100", "total": 24, "healthy": 15, "schedulable": 7}
    ]
    by_node = {n["name"]: (n["healthy"], n["schedulable"]) for n in capacity["nodes"]}
    assert by_node == {"ready": (7, 7), "cordoned": (8, 0), "failed": (0, 0)}


def test_topology_nests_racks_nodes_and_nvlink_domains(
    fleet: Cluster, keys: dict[str, str]
) -> None:
    node(fleet, "a", rack="r1")
    node(fleet, "b", rack="r2", gpus=2)

    topology = client_with_key(keys["operator"]).get(f"/api/v1/clusters/{fleet.pk}/topology").json()

    racks = topology["spines"][0]["racks"]
    assert [r["rack"] for r in racks] == ["r1", "r2"]
    assert racks[1]["nodes"][0]["nvlink_domains"] == [
        {
            "domain": 0,
            "gpus": [
                {
                    "index": 0,
                    "uuid": racks[1]["nodes"][0]["nvlink_domains"][0]["gpus"][0]["uuid"],
                    "healthy": True,
                },
                {
                    "index": 1,
                    "uuid": racks[1]["nodes"][0]["nvlink_domains"][0]["gpus"][1]["uuid"],
                    "healthy": True,
                },
            ],
        }
    ]


def test_the_heartbeat_task_fails_silent_nodes(fleet: Cluster, settings) -> None:  # type: ignore[no-untyped-def]
    from inventory.tasks import check_heartbeats

    silent = put_in_state(node(fleet, "silent")[0], NodeState.READY)
    Node.objects.filter(pk=silent.pk).update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    settings.HEARTBEAT_TIMEOUT_S = 60

    assert check_heartbeats() == 1
    assert Node.objects.get(pk=silent.pk).state == NodeState.FAILED


def test_admin_node_actions_go_through_the_lifecycle(fleet: Cluster) -> None:
    from django.test import Client

    from tenants.models import User

    ready = put_in_state(node(fleet, "ready")[0], NodeState.READY)
    registered, _ = node(fleet, "registered")
    browser = Client()
    browser.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))

    response = browser.post(
        "/admin/inventory/node/",
        {"action": "cordon", "_selected_action": [str(ready.pk), str(registered.pk)]},
        follow=True,
    )

    shown = [str(m) for m in response.context["messages"]]
    assert Node.objects.get(pk=ready.pk).state == NodeState.CORDONED
    assert Node.objects.get(pk=registered.pk).state == NodeState.REGISTERED
    assert any("invalid_transition" in m for m in shown)
    assert store.read_stream("node", str(ready.pk))[-1].metadata["actor"].startswith("user:")
