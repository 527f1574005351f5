"""The node agent's full heartbeat (PROTOCOL §1): telemetry written in place, never an event;
a faulty GPU is an event; a node whose report does not match the fleet is cordoned once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from events import store
from inventory import services
from inventory.lifecycle import NodeAction, NodeState
from inventory.models import Cluster, Gpu, Node
from tenants.models import User
from tests.builders import Builder, client_with_key, run
from tests.builders.fleet import OPERATOR, cluster, h100, node, put_in_state

pytestmark = pytest.mark.django_db

AGENT: dict[str, Any] = {
    "version": "0.1.0",
    "runtime": "process",
    "address": "10.0.0.5",
    "fake_gpus": False,
    "cgroups": False,
    "cgroups_note": "cgroup v2 not writable here",
    "volumes_disk_gb": 500,  # disk offered to local volumes
}


def gpus(count: int = 2, **fields: Any) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "uuid": f"GPU-agent-{i}",
            "model": "NVIDIA H100 SXM",
            "memory_mib": 81559,
            "healthy": True,
            "reason": "",
            "utilization_pct": 37.5,
            "memory_used_mib": 1024,
        }
        | fields
        for i in range(count)
    ]


def heartbeat(target: Node, token: str, body: dict[str, Any]) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    return client.post(f"/api/v1/nodes/{target.pk}/heartbeat", body, format="json")


def node_events(target: Node) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.data) for e in store.read_stream("node", str(target.pk))]


@pytest.fixture
def fleet() -> Cluster:
    return cluster()


@pytest.fixture
def ready(fleet: Cluster) -> tuple[Node, str]:
    target, token = node(fleet, gpus=2)
    return put_in_state(target, NodeState.READY), token


def test_full_telemetry_is_stored_in_place_and_is_no_event(ready: tuple[Node, str]) -> None:
    target, token = ready
    before = node_events(target)

    response = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2)})

    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["accepting_work"], body["mismatch"]) == ("ready", True, "")
    assert body["received_at"]
    assert node_events(target) == before
    stored = Node.objects.get(pk=target.pk)
    assert stored.agent_info == AGENT
    assert stored.agent_address == "10.0.0.5"
    telemetry = list(
        Gpu.objects.filter(node=target).values_list(
            "utilization_pct", "memory_used_mib", "idle_since"
        )
    )
    assert telemetry == [(37.5, 1024, None), (37.5, 1024, None)]
    assert all(Gpu.objects.filter(node=target).values_list("telemetry_at", flat=True))


def test_an_old_body_stays_valid_and_checks_nothing(ready: tuple[Node, str]) -> None:
    target, token = ready

    response = heartbeat(target, token, {"gpus": [{"index": 1, "healthy": True}]})

    assert response.status_code == 200
    assert (response.json()["accepting_work"], response.json()["mismatch"]) == (True, "")
    assert Node.objects.get(pk=target.pk).agent_info == {}


def test_idle_since_is_when_low_utilisation_was_first_seen(ready: tuple[Node, str]) -> None:
    target, _ = ready
    start = timezone.now()
    agent = services.AgentInfo(**AGENT)

    def beat(utilization: float, at: Any) -> None:
        run(
            services.node_heartbeat,
            node=target,
            agent=agent,
            now=at,
            gpus=[
                services.GpuHealth(index=i, healthy=True, utilization_pct=utilization)
                for i in range(2)
            ],
        )

    def idle_since() -> set[Any]:
        return set(Gpu.objects.filter(node=target).values_list("idle_since", flat=True))

    beat(2.0, start)
    beat(4.9, start + timedelta(minutes=5))
    assert idle_since() == {start}
    beat(80.0, start + timedelta(minutes=6))
    assert idle_since() == {None}


def test_a_faulty_gpu_is_the_gpu_failed_event(ready: tuple[Node, str]) -> None:
    target, token = ready
    report = gpus(2)
    report[1] |= {"healthy": False, "reason": "XID 79"}

    response = heartbeat(target, token, {"agent": AGENT, "gpus": report})

    assert response.status_code == 200
    assert node_events(target)[-1] == ("inventory.GpuFailed", {"index": 1, "reason": "XID 79"})
    assert response.json()["state"] == "ready"


def test_a_gpu_count_mismatch_cordons_the_node_once(ready: tuple[Node, str]) -> None:
    target, token = ready
    before = len(node_events(target))

    first = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(3)})
    second = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(3)})

    assert first.status_code == second.status_code == 200
    mismatch = "3 GPUs reported, the fleet has 2; GPU 2 not in the fleet"
    for response in (first, second):
        shown = response.json()
        assert (shown["state"], shown["accepting_work"], shown["mismatch"]) == (
            "cordoned",
            False,
            mismatch,
        )
    changes = node_events(target)[before:]
    assert [(t, d["action"], d["reason"]) for t, d in changes] == [
        ("inventory.NodeStateChanged", "cordon", f"inventory mismatch: {mismatch}")
    ]


def test_a_fixed_report_clears_the_mismatch_and_the_operator_uncordons(
    ready: tuple[Node, str],
) -> None:
    target, token = ready
    heartbeat(target, token, {"agent": AGENT, "gpus": gpus(1)})

    fixed = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2)})
    services.node_transition(actor=OPERATOR, node=target, action=NodeAction.UNCORDON)
    after = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2)})

    assert (fixed.json()["state"], fixed.json()["mismatch"]) == ("cordoned", "")
    assert fixed.json()["accepting_work"] is False
    assert (after.json()["state"], after.json()["accepting_work"]) == ("ready", True)


def test_a_model_mismatch_cordons(ready: tuple[Node, str]) -> None:
    target, token = ready

    response = heartbeat(
        target, token, {"agent": AGENT, "gpus": gpus(2, model="NVIDIA A100-SXM4-80GB")}
    )

    assert response.json()["state"] == "cordoned"
    assert response.json()["mismatch"] == "model NVIDIA A100-SXM4-80GB reported, the fleet has h100"
    assert Node.objects.get(pk=target.pk).state_reason.startswith("inventory mismatch: model")


@pytest.mark.parametrize("model", ["H100", "nvidia h100 sxm", "NVIDIA-H100-SXM", "h100"])
def test_a_model_matches_the_slug_or_the_name_normalised(
    ready: tuple[Node, str], model: str
) -> None:
    target, token = ready

    response = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2, model=model)})

    assert (response.json()["state"], response.json()["mismatch"]) == ("ready", "")


def _node_with_uuids(fleet: Cluster) -> tuple[Node, str]:
    registered, token = services.node_register(
        actor=OPERATOR,
        cluster=fleet,
        name="known-uuids",
        gpu_model=h100(),
        cpu_milli=96_000,
        memory_mib=1_048_576,
        gpus=[services.GpuSlot(index=i, uuid=f"GPU-fleet-{i}") for i in range(2)],
    )
    assert token is not None
    return put_in_state(registered, NodeState.READY), token


def test_a_uuid_differing_from_a_real_one_cordons(fleet: Cluster) -> None:
    target, token = _node_with_uuids(fleet)
    report = gpus(2)
    report[0]["uuid"] = "GPU-fleet-0"

    response = heartbeat(target, token, {"agent": AGENT, "gpus": report})

    assert response.json()["state"] == "cordoned"
    assert response.json()["mismatch"] == "UUID of GPU 1 differs from the fleet's"


def test_a_uuid_differing_from_a_stand_in_is_no_mismatch(ready: tuple[Node, str]) -> None:
    target, token = ready

    response = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2, uuid="GPU-other")})

    assert (response.json()["state"], response.json()["mismatch"]) == ("ready", "")


def test_fake_gpus_compare_count_and_model_but_never_uuids(fleet: Cluster) -> None:
    target, token = _node_with_uuids(fleet)
    fake = AGENT | {"fake_gpus": True}

    same = heartbeat(target, token, {"agent": fake, "gpus": gpus(2, uuid="GPU-fake")})
    fewer = heartbeat(target, token, {"agent": fake, "gpus": gpus(1, uuid="GPU-fake")})

    assert (same.json()["state"], same.json()["mismatch"]) == ("ready", "")
    assert fewer.json()["mismatch"] == "1 GPUs reported, the fleet has 2"
    assert fewer.json()["state"] == "cordoned"


def test_a_mismatch_of_a_node_that_cannot_be_cordoned_changes_no_state(fleet: Cluster) -> None:
    target, token = node(fleet, gpus=2)  # registered: not in service
    before = node_events(target)

    response = heartbeat(target, token, {"agent": AGENT, "gpus": gpus(3)})

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["accepting_work"]) == ("registered", False)
    assert response.json()["mismatch"].startswith("3 GPUs reported")
    assert node_events(target) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpus": gpus(1, utilization_pct=101)}, "gpus"),
        ({"gpus": gpus(1, utilization_pct=-0.5)}, "gpus"),
        ({"gpus": gpus(1, memory_used_mib=-1)}, "gpus"),
        ({"gpus": gpus(1, memory_mib=-1)}, "gpus"),
        ({"gpus": gpus(1, utilization_pct="37")}, "gpus"),
        ({"gpus": gpus(1, memory_used_mib=1.5)}, "gpus"),
        ({"gpus": gpus(1, uuid=7)}, "gpus"),
        ({"gpus": gpus(1, healthy="yes")}, "gpus"),
        ({"gpus": [*gpus(1), *gpus(1)]}, "gpus"),
        ({"agent": "0.1.0"}, "agent"),
        ({"agent": None}, "agent"),
        ({"agent": AGENT | {"fake_gpus": "true"}}, "agent"),
        ({"agent": AGENT | {"runtime": "lxc"}}, "agent"),
        ({"agent": AGENT | {"address": "10.0.0.5; rm -rf /"}}, "agent"),
        ({"agent": AGENT | {"version": "x" * 65}}, "agent"),
    ],
    ids=[
        "utilization-101",
        "utilization-negative",
        "memory-used-negative",
        "memory-negative",
        "utilization-string",
        "memory-float",
        "uuid-number",
        "healthy-string",
        "index-twice",
        "agent-string",
        "agent-null",
        "fake-gpus-string",
        "runtime-unknown",
        "address-not-a-host",
        "version-too-long",
    ],
)
def test_bad_reports_are_400_and_change_nothing(
    ready: tuple[Node, str], body: dict[str, Any], field: str
) -> None:
    target, token = ready
    before = node_events(target)

    response = heartbeat(target, token, body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == [field]
    assert Node.objects.get(pk=target.pk).last_heartbeat_at is None
    assert node_events(target) == before


def test_a_replay_keeps_the_telemetry(ready: tuple[Node, str]) -> None:
    target, token = ready
    heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2, utilization_pct=1.0)})
    fields = ("utilization_pct", "memory_used_mib", "telemetry_at", "idle_since")
    live = list(Gpu.objects.filter(node=target).values_list(*fields))

    call_command("replay", "inventory.fleet", verbosity=0)

    assert list(Gpu.objects.filter(node=target).values_list(*fields)) == live
    assert Node.objects.get(pk=target.pk).agent_address == "10.0.0.5"


def test_operators_see_the_agent_and_gpu_telemetry(ready: tuple[Node, str], build: Builder) -> None:
    target, token = ready
    heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2)})
    operator = build.user("ops@neocloud.example", is_staff=True)
    key = build.key(build.organization("Operators", owner=operator), operator)[1]

    shown = client_with_key(key).get(f"/api/v1/nodes/{target.pk}").json()

    assert shown["agent"] == AGENT
    assert shown["inventory_mismatch"] == ""
    assert shown["last_heartbeat_at"]
    assert [(g["utilization_pct"], g["memory_used_mib"]) for g in shown["gpus"]] == [
        (37.5, 1024),
        (37.5, 1024),
    ]


def test_the_node_admin_shows_the_agent_read_only(ready: tuple[Node, str]) -> None:
    target, token = ready
    heartbeat(target, token, {"agent": AGENT, "gpus": gpus(2)})
    admin = Client()
    admin.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))

    page = admin.get(f"/admin/inventory/node/{target.pk}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "0.1.0 · process · real GPUs · no cgroups (cgroup v2 not writable here)" in text
    assert "10.0.0.5" in text
    assert "37.5" in text
    assert "<form" in text
    assert 'name="_save"' not in text
