"""A web app in a real run of a real node agent (its own uid, a port of the node's range),
reached through a real Caddy at the URL NeoCloud gives it, until the run ends.

The agent answers to a fake control plane (tests/agent/fake_control_plane.py), which gives
it the run; the address it reports is the one NeoCloud's node API is sent, as the node's
agent would. Needs a root agent (a run's own uid), like tests/agent/test_isolation.py."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent import users
from bench.gateway_parts import SYSTEM_PYTHON, WEBAPP
from gateway import selectors
from scheduler.specs import RestartPolicy, WorkloadKind
from tests.agent.conftest import NODE_ID, AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane
from tests.builders import Builder
from tests.execution.conftest import Agent, Customer, customer_of, submit
from tests.gateway.conftest import Gateway, needs_caddy, served

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    needs_caddy,
    pytest.mark.skipif(not users.isolating(), reason="runs get uids of their own only as root"),
    pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason=f"{SYSTEM_PYTHON} runs the app"),
]

RANGE = range(30000, 33000)


def port_in_range() -> int:
    for port in RANGE:
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.bind(("127.0.0.1", port))
            return port
    raise AssertionError("no free port in the agent's range")


@pytest.fixture
def plane() -> Iterator[FakeControlPlane]:
    control_plane = FakeControlPlane(NODE_ID)
    control_plane.start()
    yield control_plane
    control_plane.stop()


@pytest.fixture
def real_agent(plane: FakeControlPlane, tmp_path: Path) -> Iterator[AgentProcess]:
    agent = AgentProcess(plane, tmp_path, "--port-range", f"{RANGE.start}-{RANGE.stop - 1}")
    agent.start()
    yield agent
    assert agent.process is not None
    agent.process.kill()
    agent.process.wait(timeout=10)
    for report in plane.applied:
        if report["kind"] == "started" and report.get("pid"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(report["pid"], signal.SIGKILL)


def test_an_app_in_a_real_agents_run_answers_through_the_gateway_until_the_run_ends(
    gateway: Gateway,
    agents: list[Agent],
    build: Builder,
    plane: FakeControlPlane,
    real_agent: AgentProcess,
) -> None:
    port = port_in_range()
    plane.assign("web", argv=[SYSTEM_PYTHON, str(WEBAPP), str(port), "a-run"], ports=[port])
    plane.wait_for(lambda: plane.output("web").startswith(b"listening"), timeout=30)
    (reported,) = plane.reports("web", "ports")[0]["ports"]
    acme: Customer = customer_of(build, "Acme")
    workload = submit(
        acme,
        "web",
        kind=WorkloadKind.SERVICE,
        restart_policy=RestartPolicy.ON_FAILURE,
        ports=(port,),
        http_ports=(port,),
    )
    ((agent, assignment),) = [
        (a, listed) for a in agents for listed in a.assignments()["assignments"]
    ]
    served(agent, assignment, port, reported["address"])
    token = acme.client.post(
        f"/api/v1/workloads/{workload.pk}/web-endpoints/tokens", {"port": port}, format="json"
    ).json()["token"]
    host = selectors.endpoint_host(selectors.endpoint_id(workload.pk, port))
    bearer = {"Authorization": f"Bearer {token}"}

    answered = gateway.get(host, "/notebooks", **bearer)
    echoed = gateway.echo(host, "hi", **bearer)
    acme.client.post(f"/api/v1/workloads/{workload.pk}/cancel", {})
    refused = gateway.get(host, "/notebooks", **bearer)
    plane.release("web")
    plane.wait_for(lambda: plane.ended("web"), timeout=30)

    assert reported["address"] == f"127.0.0.1:{port}"
    assert (answered.status_code, answered.text) == (200, "hello from a-run at /notebooks\n")
    assert echoed == "echo: hi"
    assert refused.status_code in {403, 404}  # the auth check, or the route already gone
    assert "hello" not in refused.text
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{reported['address']}/", timeout=5)
