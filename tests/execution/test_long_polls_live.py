"""Long polls against a real server (``tests.live.ControlPlane``: the ASGI application as
production serves it): while more follows wait than the old server had threads, health checks
and heartbeats still answer; a new chunk wakes every follow of its workload; a change of a
node's desired state wakes its agent's poll; follows beyond a key's cap are refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connections

from neocloud.core.correlation import HEADER
from scheduler import services as scheduler
from tests.builders import Builder, run
from tests.celery_worker import worker_queue
from tests.execution.conftest import Agent, Customer, customer_of, submit
from tests.live import ControlPlane

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

FOLLOWS = 24  # more than the 16 threads the test server had, each holding one while it waited


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ControlPlane]:
    settings = {"LOG_FOLLOWS_PER_KEY": FOLLOWS, "LOG_FOLLOWS_PER_ORGANIZATION": 100}
    with worker_queue() as queue:
        control_plane = ControlPlane(queue=queue, log_dir=tmp_path, settings=settings).start()
        try:
            yield control_plane
        finally:
            control_plane.stop()


def _key(customer: Customer) -> str:
    return str(customer.client._credentials["HTTP_AUTHORIZATION"])  # type: ignore[attr-defined]


async def _in_thread(function: Callable[[], Any]) -> Any:
    """A write through this process's code, off the event loop (Django's ORM is sync)."""

    def closing() -> Any:
        try:
            return function()
        finally:
            connections.close_all()

    return await asyncio.to_thread(closing)


def test_while_follows_wait_health_and_heartbeats_answer_and_a_chunk_wakes_them(
    server: ControlPlane, agents: list[Agent], acme: Customer, build: Builder
) -> None:
    other = customer_of(build, "Globex")
    workload, other_workload = submit(acme), submit(other)
    for one in agents:
        for listed in one.assignments()["assignments"]:
            assert one.report(listed["id"], "started", pid=1).status_code == 200
    ((agent, assignment),) = [
        (one, listed["id"])
        for one in agents
        for listed in one.assignments()["assignments"]
        if listed["workload_id"] == str(workload.pk)
    ]
    version = agent.assignments()["version"]
    node_headers = {"Authorization": f"Node {agent.token}"}
    logs = f"/api/v1/workloads/{workload.pk}/logs"

    async def scenario() -> None:
        limits = httpx.Limits(max_connections=FOLLOWS + 10)
        async with httpx.AsyncClient(base_url=server.url, timeout=90, limits=limits) as client:
            key = {"Authorization": _key(acme)}
            poll = asyncio.create_task(
                client.get(
                    f"/api/v1/nodes/{agent.node.pk}/assignments",
                    params={"since": version, "wait": 60},
                    headers=node_headers,
                )
            )
            opened = [
                asyncio.create_task(
                    client.get(logs, params={"follow": "true", "wait": 30}, headers=key)
                )
                for _ in range(FOLLOWS + 1)
            ]

            # Given FOLLOWS follows open (the one more is refused: the key's slots are all
            # taken) and an agent's poll waiting,
            (refused,), follows = await asyncio.wait(opened, return_when=asyncio.FIRST_COMPLETED)
            assert refused.result().status_code == 429
            assert refused.result().json()["error"]["code"] == "too_many_follows"
            assert refused.result().headers[HEADER]  # the middlewares' work is kept
            # (a waiter holds no thread: Django's chain gave each one a thread for its life),
            assert server.threads() < FOLLOWS

            # when the load balancer checks health and the agent reports in,
            health = await client.get("/healthz")
            heartbeat = await client.post(
                f"/api/v1/nodes/{agent.node.pk}/heartbeat", json={}, headers=node_headers
            )
            # another organization follows its own workload, and nothing is refused it,
            others = await client.get(
                f"/api/v1/workloads/{other_workload.pk}/logs",
                params={"follow": "true", "wait": 1},
                headers={"Authorization": _key(other)},
            )

            # then they answer while every follow and the poll still wait;
            assert health.status_code == 200
            assert heartbeat.status_code == 200, heartbeat.text
            assert others.status_code == 200, others.text
            assert len(follows) == FOLLOWS
            assert not any(f.done() for f in follows)
            assert not poll.done()

            # a chunk wakes every follow with it, and their slots are free again;
            shipped = await _in_thread(lambda: agent.ship(assignment, 0, b"late\n"))
            assert shipped.status_code == 200
            answers = await asyncio.gather(*follows)
            assert {a.status_code for a in answers} == {200}
            assert {tuple(e["text"] for e in a.json()["entries"]) for a in answers} == {("late\n",)}
            cursor = answers[0].json()["cursor"]
            again = await client.get(
                logs, params={"follow": "true", "wait": 1, "cursor": cursor}, headers=key
            )
            assert again.status_code == 200, again.text

            # and a cancel changes the node's desired state, which answers its agent's poll.
            await _in_thread(lambda: run(scheduler.workload_cancel, workload=workload))
            listing = (await poll).json()
            assert listing["version"] != version
            desired = {a["id"]: a["desired"] for a in listing["assignments"]}
            assert desired[assignment] == "stop"

    asyncio.run(scenario())
