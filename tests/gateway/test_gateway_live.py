"""Web ports through a real Caddy: a member (console session, by a one-time ticket) and a
token holder reach the run's app, websockets included; an anonymous caller and another
organization's member are refused; an ended run's URL stops answering at once.

The app (bench/webapp.py) is started by the test and reported as the endpoint by the node's
agent (played by an API client); ``test_agent_run.py`` has a real agent run it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from bench.gateway_parts import webapp_started
from gateway import selectors, services
from gateway.caddy import Route, route_config
from scheduler.models import Workload
from scheduler.specs import RestartPolicy, WorkloadKind
from tests.builders import Builder, client_with_key
from tests.execution.conftest import Agent, Customer, submit
from tests.gateway.conftest import Gateway, needs_caddy, served

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, needs_caddy]

PORT = 8888


@pytest.fixture
def lab(gateway: Gateway, agents: list[Agent], build: Builder) -> Iterator[dict[str, Any]]:
    """Acme's service with web port 8888, served by the app on a loopback port."""
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    project = build.project(organization, "Training")
    acme = Customer(organization, project, client_with_key(build.key(organization, owner)[1]))
    with webapp_started("lab") as app_port:
        workload = submit(
            acme,
            "lab",
            kind=WorkloadKind.SERVICE,
            restart_policy=RestartPolicy.ON_FAILURE,
            ports=(PORT,),
            http_ports=(PORT,),
        )
        ((agent, assignment),) = [
            (a, listed) for a in agents for listed in a.assignments()["assignments"]
        ]
        served(agent, assignment, PORT, f"127.0.0.1:{app_port}")
        host = selectors.endpoint_host(selectors.endpoint_id(workload.pk, PORT))
        yield {"acme": acme, "owner": owner, "workload": workload, "host": host}


def token_of(acme: Customer, workload: Workload) -> str:
    response = acme.client.post(
        f"/api/v1/workloads/{workload.pk}/web-endpoints/tokens", {"port": PORT}, format="json"
    )
    assert response.status_code == 201, response.content
    return str(response.json()["token"])


def test_a_reported_web_port_gets_a_route_and_a_url(gateway: Gateway, lab: dict[str, Any]) -> None:
    shown = lab["acme"].get(f"workloads/{lab['workload'].pk}/web-endpoints").json()

    assert shown == [{"port": PORT, "url": f"http://{lab['host']}/", "live": True}]
    assert [r["match"][0]["host"] for r in gateway.routes()] == [[lab["host"]]]


def test_a_token_holder_passes_and_a_wrong_token_or_none_is_refused(
    gateway: Gateway, lab: dict[str, Any]
) -> None:
    token = token_of(lab["acme"], lab["workload"])

    passed = gateway.get(lab["host"], "/v1/models", Authorization=f"Bearer {token}")
    wrong = gateway.get(lab["host"], Authorization=f"Bearer {token[:-2]}xx")
    anonymous = gateway.get(lab["host"], Accept="application/json")
    browser = gateway.get(lab["host"], "/lab", Accept="text/html")

    assert (passed.status_code, passed.text) == (200, "hello from lab at /v1/models\n")
    assert wrong.status_code == 401
    assert anonymous.status_code == 401
    assert "hello" not in wrong.text + anonymous.text
    assert browser.status_code == 302
    assert browser.headers["Location"].endswith(
        f"/gateway/open?endpoint={lab['workload'].pk.hex}-{PORT}&next=%2Flab"
    )


def test_a_token_in_the_query_becomes_the_endpoints_cookie(
    gateway: Gateway, lab: dict[str, Any]
) -> None:
    token = token_of(lab["acme"], lab["workload"])

    entered = gateway.get(lab["host"], f"/tree?x=1&token={token}")
    cookie = entered.cookies["neocloud_gateway"]
    then = gateway.get(lab["host"], "/tree?x=1", Cookie=f"neocloud_gateway={cookie}")

    assert (entered.status_code, entered.headers["Location"]) == (302, "/tree?x=1")
    assert "HttpOnly" in entered.headers["Set-Cookie"]
    assert "Domain" not in entered.headers["Set-Cookie"]  # this endpoint's name alone
    assert (then.status_code, then.text) == (200, "hello from lab at /tree?x=1\n")


def test_a_member_signed_in_to_the_console_passes_once_by_ticket(
    gateway: Gateway, lab: dict[str, Any]
) -> None:
    console = Client()
    console.force_login(lab["owner"])
    endpoint = f"{lab['workload'].pk.hex}-{PORT}"

    opened = console.get("/gateway/open", {"endpoint": endpoint, "next": "/lab?a=b"})
    url = urlsplit(opened["Location"])
    entered = gateway.get(url.netloc, f"{url.path}?{url.query}")
    replayed = gateway.get(url.netloc, f"{url.path}?{url.query}")
    cookie = entered.cookies["neocloud_gateway"]
    then = gateway.get(lab["host"], "/lab", Cookie=f"neocloud_gateway={cookie}")

    assert opened.status_code == 302
    assert url.netloc == lab["host"]
    assert (entered.status_code, entered.headers["Location"]) == (302, "/lab?a=b")
    assert replayed.status_code == 403  # a ticket opens once
    assert (then.status_code, then.text) == (200, "hello from lab at /lab\n")


def test_another_organizations_member_is_refused(
    gateway: Gateway, lab: dict[str, Any], build: Builder
) -> None:
    stranger = build.user()
    build.organization("Initech", owner=stranger)
    console = Client()
    console.force_login(stranger)
    endpoint = f"{lab['workload'].pk.hex}-{PORT}"

    opened = console.get("/gateway/open", {"endpoint": endpoint, "next": "/"})
    tokens = client_with_key(build.key(stranger.memberships.get().organization, stranger)[1])
    token = tokens.post(
        f"/api/v1/workloads/{lab['workload'].pk}/web-endpoints/tokens", {"port": PORT}
    )

    assert opened.status_code == 404
    assert token.status_code == 404


def test_a_websocket_passes_to_a_token_holder(gateway: Gateway, lab: dict[str, Any]) -> None:
    token = token_of(lab["acme"], lab["workload"])

    assert gateway.echo(lab["host"], "ping", Authorization=f"Bearer {token}") == "echo: ping"


def test_an_ended_runs_url_stops_answering_at_once_even_with_its_route_left(
    gateway: Gateway, lab: dict[str, Any]
) -> None:
    token = token_of(lab["acme"], lab["workload"])
    route = gateway.routes()[0]
    bearer = {"Authorization": f"Bearer {token}"}
    assert gateway.get(lab["host"], **bearer).status_code == 200

    cancel = lab["acme"].client.post(f"/api/v1/workloads/{lab['workload'].pk}/cancel", {})
    removed = gateway.routes()
    gateway.caddy.route_put(route)  # as if the removal lagged
    refused = gateway.get(lab["host"], **bearer)

    assert cancel.status_code == 200, cancel.content
    assert removed == []
    assert refused.status_code == 403
    assert "hello" not in refused.text


def test_the_reconcile_puts_routes_back_to_the_live_endpoints(
    gateway: Gateway, lab: dict[str, Any]
) -> None:
    live = gateway.routes()
    stale = Route(endpoint_id="gone", host="gone.gw.test", upstreams=("127.0.0.1:9",))
    gateway.caddy.route_put(route_config(stale, auth_upstream="127.0.0.1:9"))
    assert len(gateway.routes()) == 2

    services.routes_reconcile()

    assert gateway.routes() == live


def test_the_redirect_after_a_token_stays_on_the_endpoint(
    gateway: Gateway, lab: dict[str, Any]
) -> None:
    token = token_of(lab["acme"], lab["workload"])

    entered = gateway.get(lab["host"], f"//evil.example/x?token={token}")

    assert entered.status_code == 302
    assert entered.headers["Location"] == "/x"  # a path of this endpoint, not another host
