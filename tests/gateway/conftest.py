"""The gateway's fixtures: a real Caddy (admin API and server on loopback ports) in front of
a live NeoCloud server, and the execution tests' agents played by API clients."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer
from websockets.sync.client import connect

from bench.gateway_parts import caddy_binary, caddy_started, free_port
from gateway import services
from gateway.caddy import Caddy
from tests.execution.conftest import Agent, agent_driver, agents, in_process

__all__ = ["agent_driver", "agents", "in_process"]

DOMAIN = "gw.test"

needs_caddy = pytest.mark.skipif(caddy_binary() is None, reason="caddy is not installed")


@dataclass
class Gateway:
    """Caddy's gateway server, reached on loopback with the endpoint's name as the Host."""

    port: int
    caddy: Caddy

    def get(self, host: str, path: str = "/", **headers: str) -> httpx.Response:
        return httpx.get(
            f"http://127.0.0.1:{self.port}{path}",
            headers={"Host": host, **headers},
            follow_redirects=False,
            timeout=10,
        )

    def echo(self, host: str, text: str, **headers: str) -> str:
        """A websocket to ``/ws`` through the gateway: what the app echoes of ``text``."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        with connect(f"ws://{host}/ws", sock=sock, additional_headers=headers) as ws:
            ws.send(text)
            return str(ws.recv(timeout=10))

    def routes(self) -> list[dict[str, Any]]:
        server = self.caddy.server() or {}
        return [r for r in server.get("routes", []) if "@id" in r]


@pytest.fixture
def gateway(live_server: LiveServer, settings: Settings) -> Iterator[Gateway]:
    with caddy_started() as admin:
        port = free_port()
        settings.GATEWAY_DOMAIN = DOMAIN
        settings.GATEWAY_SCHEME = "http"
        settings.GATEWAY_ADMIN_URL = admin
        settings.GATEWAY_LISTEN = [f"127.0.0.1:{port}"]
        settings.GATEWAY_AUTH_UPSTREAM = live_server.url.removeprefix("http://")
        settings.GATEWAY_CONSOLE_URL = live_server.url
        services.routes_reconcile()
        yield Gateway(port=port, caddy=Caddy(admin))


def served(agent: Agent, assignment: dict[str, Any], port: int, address: str) -> None:
    """The agent says the run started and where its port is reached."""
    assert agent.report(assignment["id"], "started", pid=1).status_code == 200
    ports = [{"port": port, "address": address}]
    assert agent.report(assignment["id"], "ports", ports=ports).status_code == 200
