"""Real execution end to end: gunicorn serving the control plane, a real ``celery worker``,
real ``neocloud-agent`` processes with fake GPUs, on PostgreSQL and Redis."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from execution.models import Assignment
from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Node
from scheduler import tasks
from tenants.models import Organization, Project, Role
from tests.builders import Builder, client_with_key, fleet, run
from tests.builders.fleet import put_in_state
from tests.celery_worker import CeleryWorker, celery_worker, wait_until, worker_queue
from tests.live import ControlPlane, NodeAgent, kill_runs

# Fast clocks for the processes: cycles, leases, the agent's stop grace.
SETTINGS = {
    "SCHEDULER_DEBOUNCE_S": 0.02,
    "SCHEDULER_LEASE_S": 3,
    "AGENT_STOP_GRACE_S": 2,
}


@dataclass
class Site:
    """A cluster of agent nodes with its control plane, worker and customer."""

    tmp_path: Path
    control_plane: ControlPlane
    worker: CeleryWorker
    client: APIClient
    organization: Organization
    project: Project
    nodes: list[Node] = field(default_factory=list)
    tokens: dict[uuid.UUID, str] = field(default_factory=dict)
    agents: list[NodeAgent] = field(default_factory=list)

    def agent(self, node: Node, *extra: str) -> NodeAgent:
        """A started agent for ``node`` (a second call for one node: same state directory)."""
        started = NodeAgent(
            url=self.control_plane.url,
            node_id=node.pk,
            token=self.tokens[node.pk],
            work_dir=self.tmp_path / f"agent-{node.name}",
            gpus=node.gpus.count(),
            gpu_model="h100",
            extra=extra,
        ).start()
        self.agents.append(started)
        return started

    def submit(self, name: str, command: list[str], **fields: Any) -> dict[str, Any]:
        body = {
            "project": str(self.project.pk),
            "name": name,
            "gpu_models": ["h100"],
            "gpus_per_node": fields.pop("gpus_per_node", 1),
            "command": command,
            **fields,
        }
        response = self.client.post(
            "/api/v1/workloads", body, format="json", HTTP_IDEMPOTENCY_KEY=f"{name}-{uuid.uuid4()}"
        )
        assert response.status_code == 201, response.json()
        return response.json()  # type: ignore[no-any-return]

    def workload(self, workload_id: str) -> dict[str, Any]:
        return self.client.get(f"/api/v1/workloads/{workload_id}").json()  # type: ignore[no-any-return]

    def assignments(self, workload_id: str) -> list[dict[str, Any]]:
        body = self.client.get(f"/api/v1/workloads/{workload_id}/assignments").json()
        return body["results"] if isinstance(body, dict) else body  # type: ignore[no-any-return]

    def logs(self, workload_id: str) -> tuple[str, dict[str, Any]]:
        """All of the workload's output so far (rank 0 first), and the last page."""
        text, cursor, page = [], "", {}
        while True:
            page = self.client.get(
                f"/api/v1/workloads/{workload_id}/logs", {"cursor": cursor} if cursor else {}
            ).json()
            text += [entry["text"] for entry in page["entries"]]
            if not page["entries"]:
                return "".join(text), page
            cursor = page["cursor"]

    def wait_status(self, workload_id: str, *statuses: str, timeout: float = 60) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> bool:
            seen.update(self.workload(workload_id))
            return seen["status"] in statuses

        wait_until(reached, timeout=timeout, what=f"{workload_id} to be {statuses}; {self.why()}")
        return seen

    def why(self) -> str:
        """What the processes said, for a failing wait."""
        parts = [f"--- control plane\n{self.control_plane.log()[-4000:]}"]
        parts.append(f"--- worker\n{self.worker.log()[-3000:]}")
        parts += [f"--- agent {a.log_path.name}\n{a.log()[-3000:]}" for a in self.agents]
        return "\n".join(parts)


def _beat(stop: threading.Event) -> None:
    """Beat's tick, as production runs it (reconciles runs whose check is due)."""
    while not stop.wait(1.0):
        tasks.tick.delay()


@pytest.fixture
def site(build: Builder, tmp_path: Path) -> Iterator[Callable[..., Site]]:
    """``site(nodes=1, gpus=4)``: agent nodes, ready, with everything running."""
    stop = threading.Event()
    made: list[Site] = []
    with worker_queue() as queue:

        def make(nodes: int = 1, gpus: int = 4, settings: dict[str, Any] | None = None) -> Site:
            settings = {**SETTINGS, **(settings or {})}
            cluster, model = fleet.cluster("fra1"), fleet.h100()
            organization = build.organization("Acme")
            project = build.project(organization, "Training")
            membership = build.member(organization, Role.ADMIN)
            _, secret = build.key(organization, membership.user)
            worker_cm = celery_worker(queue=queue, log_dir=tmp_path, settings=settings)
            worker = worker_cm.__enter__()
            control_plane = ControlPlane(queue=queue, log_dir=tmp_path, settings=settings).start()
            made_site = Site(
                tmp_path=tmp_path,
                control_plane=control_plane,
                worker=worker,
                client=client_with_key(secret),
                organization=organization,
                project=project,
            )
            made_site._worker_cm = worker_cm  # type: ignore[attr-defined]
            for i in range(nodes):
                node, token = run(
                    inventory.node_register,
                    cluster=cluster,
                    name=f"gpu-{i:02d}",
                    gpu_model=model,
                    cpu_milli=32_000,
                    memory_mib=262_144,
                    gpus=[inventory.GpuSlot(index=g) for g in range(gpus)],
                    driver="agent",
                )
                made_site.nodes.append(put_in_state(node, NodeState.READY))
                made_site.tokens[node.pk] = token
            threading.Thread(target=_beat, args=(stop,), daemon=True).start()
            made.append(made_site)
            return made_site

        try:
            yield make
        finally:
            stop.set()
            for one in made:
                for agent in one.agents:
                    agent.kill()
            kill_runs([str(i) for i in Assignment.objects.values_list("id", flat=True)])
            for one in made:
                one.control_plane.stop()
                one._worker_cm.__exit__(None, None, None)  # type: ignore[attr-defined]
