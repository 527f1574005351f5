"""Fixtures of the execution tests: a ready fleet run by the ``agent`` driver, its agents
played by API clients with their node tokens, and a customer with an API key."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from inventory import services as inventory
from inventory.models import Node
from scheduler import services as scheduler
from scheduler.models import Workload
from tenants import services as tenancy
from tenants.models import Organization, Project
from tests.builders import Builder, client_with_key, run
from tests.scheduler.conftest import GpuFleet, in_process, job, ready_fleet

__all__ = ["in_process"]


def off_the_loop(call: Callable[[], Any]) -> Any:
    """``call()``, on a thread of its own when this one has an event loop marked running:
    Playwright's sync API leaves its loop so after a Chromium test of the same session, and
    the test client serves an async view (a long poll) through ``async_to_sync``, which
    refuses to run beside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


@dataclass
class Agent:
    """A node agent as the protocol has it, each report numbered per assignment."""

    node: Node
    token: str
    seqs: dict[str, int] = field(default_factory=dict)

    @property
    def client(self) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Node {self.token}")
        return client

    def url(self, what: str) -> str:
        return f"/api/v1/nodes/{self.node.pk}/{what}"

    def assignments(self, **params: Any) -> dict[str, Any]:
        response = off_the_loop(lambda: self.client.get(self.url("assignments"), params))
        assert response.status_code == 200, response.json()
        return response.json()  # type: ignore[no-any-return]

    def only(self) -> dict[str, Any]:
        (assignment,) = self.assignments()["assignments"]
        return assignment  # type: ignore[no-any-return]

    def report(self, assignment_id: str, kind: str, **fields: Any) -> Any:
        seq = fields.pop("seq", None) or self.seqs.get(assignment_id, 0) + 1
        self.seqs[assignment_id] = max(seq, self.seqs.get(assignment_id, 0))
        body = {
            "assignment_id": assignment_id,
            "seq": seq,
            "kind": kind,
            "at": "2026-12-01T17:00:00Z",
            **fields,
        }
        return self.client.post(self.url("reports"), {"reports": [body]}, format="json")

    def ship(self, assignment_id: str, offset: int, data: bytes, **extra: Any) -> Any:
        chunk = {
            "assignment_id": assignment_id,
            "offset": offset,
            "data": base64.b64encode(data).decode(),
        }
        return self.client.post(self.url("logs"), {"chunks": [chunk], **extra}, format="json")


@dataclass
class Customer:
    organization: Organization
    project: Project
    client: APIClient

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(f"/api/v1/{path}", params)


@pytest.fixture
def agent_driver(settings: Settings, in_process: None) -> None:
    settings.PROVISIONING_DRIVER = "agent"


def customer_of(build: Builder, name: str) -> Customer:
    owner = build.user()
    organization = build.organization(name, owner=owner)
    project = build.project(organization, "Training")
    return Customer(organization, project, client_with_key(build.key(organization, owner)[1]))


@pytest.fixture
def acme(build: Builder) -> Customer:
    return customer_of(build, "Acme")


def agents_of(fleet: GpuFleet) -> list[Agent]:
    """An agent per node, with a token of its own (a rotation: the builder keeps none)."""
    agents = []
    for node in fleet.nodes:
        node, token = run(inventory.node_token_rotate, node=node)
        agents.append(Agent(node=node, token=token))
    return agents


@pytest.fixture
def agents(agent_driver: None) -> list[Agent]:
    """Two ready nodes of 8 GPUs, each with its agent."""
    return agents_of(ready_fleet(nodes=2, gpus=8))


def submit(customer: Customer, name: str = "train", **fields: Any) -> Workload:
    """A job of unknown runtime (it ends when its agents say so) running ``train.py``."""
    fields.setdefault("command", ("python", "train.py"))
    fields.setdefault("runtime_estimate_s", None)
    return run(  # type: ignore[no-any-return]
        scheduler.workload_submit, project=customer.project, spec=job(name, **fields)
    )


def secret(customer: Customer, name: str, value: str) -> None:
    run(tenancy.secret_create, project=customer.project, name=name, value=value)


def status(workload: Workload) -> tuple[str, str]:
    fresh = Workload.objects.get(pk=workload.pk)
    return fresh.status, fresh.status_reason


def new_id() -> str:
    return str(uuid.uuid4())
