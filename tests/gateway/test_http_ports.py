"""Web ports in a workload's request: ``http_ports`` names those of ``ports`` the gateway
serves; ``ports: [8888]`` alone stays valid."""

from __future__ import annotations

from typing import Any

import pytest

from events.models import Event
from scheduler.models import Workload
from tests.builders import Builder, client_with_key
from tests.builders import commerce as commerce


@pytest.fixture
def world(build: Builder) -> dict[str, Any]:
    commerce.shop()
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    return {"project": build.project(organization), "key": build.key(organization, owner)[1]}


def submit(world: dict[str, Any], **fields: Any) -> Any:
    body = {"project": str(world["project"].pk), "name": "lab", "gpu_models": ["h100"]}
    body |= {"kind": "service", "restart_policy": "on_failure", **fields}
    return client_with_key(world["key"]).post("/api/v1/workloads", body, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "http_ports"),
    [({"ports": [8888, 6006], "http_ports": [8888]}, [8888]), ({"ports": [8888]}, [])],
    ids=["one-web-port", "ports-alone"],
)
def test_web_ports_reach_the_workload(
    world: dict[str, Any], fields: dict[str, Any], http_ports: list[int]
) -> None:
    response = submit(world, **fields)

    assert response.status_code == 201, response.content
    assert response.json()["http_ports"] == http_ports
    assert Workload.objects.get(pk=response.json()["id"]).http_ports == http_ports


BAD: dict[str, dict[str, Any]] = {
    "not-among-ports": {"ports": [8888], "http_ports": [8080]},
    "without-ports": {"http_ports": [8888]},
    "twice": {"ports": [8888], "http_ports": [8888, 8888]},
    "zero": {"ports": [8888], "http_ports": [0]},
    "not-a-list": {"ports": [8888], "http_ports": 8888},
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_web_ports_are_refused_with_their_field(world: dict[str, Any], case: str) -> None:
    events = Event.objects.count()

    response = submit(world, **BAD[case])

    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["http_ports"]
    assert Event.objects.count() == events
