"""The operators' capacity and fragmentation page: the selector's exact figures per shape, a
404 for anyone but staff, a bounded number of queries, and in Chromium the chart of samples
drawn without console errors and an axe-clean page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from playwright.sync_api import ConsoleMessage, Page

from inventory.lifecycle import NodeState
from scheduler import services
from scheduler.models import FragmentationSample
from tenants.models import User
from tests.builders import Builder, run
from tests.builders.fleet import node as fleet_node
from tests.builders.fleet import put_in_state
from tests.console.conftest import PASSWORD, Member, serious_violations, sign_in
from tests.scheduler.conftest import job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

ROW = re.compile(
    r'<tr data-shape="(?P<shape>[^"]+)">.*?data-figure="startable">(?P<startable>\d+)<.*?'
    r'data-figure="would_hold">(?P<would_hold>\d+)<.*?data-figure="stranded">(?P<stranded>\d+)<',
    re.S,
)


def _operator(build: Builder) -> User:
    user = build.user("ops@neocloud.test", is_staff=True)
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    return user


def _shown(html: str) -> dict[str, tuple[int, int, int]]:
    return {
        m["shape"]: (int(m["startable"]), int(m["would_hold"]), int(m["stranded"]))
        for m in ROW.finditer(html)
    }


def _figure(html: str, name: str) -> str:
    found = re.search(rf'<dd data-figure="{name}">([^<]+)</dd>', html)
    assert found is not None
    return found[1]


def test_the_page_shows_what_could_start_against_what_the_free_gpus_would_hold(
    build: Builder, member: Member, in_process: None
) -> None:
    ready_fleet(nodes=4, gpus=8)
    run(
        services.workload_submit,
        project=member.project,
        spec=job("spread", gpus=3, nodes=4, runtime_estimate_s=3600),
    )
    client = Client()
    client.force_login(_operator(build))

    response = client.get("/operator/capacity")

    assert response.status_code == 200
    html = response.content.decode()
    assert [_figure(html, f) for f in ("total", "healthy", "allocated", "free")] == [
        "32",
        "32",
        "12",
        "20",
    ]
    assert _shown(html) == {
        "1": (20, 20, 0),
        "2": (8, 10, 4),
        "4": (4, 5, 4),
        "8": (0, 2, 20),
        "2x8": (0, 1, 20),
        "4x8": (0, 0, 20),
    }
    assert "No samples yet" in html


def test_a_customer_gets_a_404_and_a_stranger_the_sign_in_page(member: Member) -> None:
    ready_fleet(nodes=1)
    customer = Client()
    customer.force_login(member.user)
    assert customer.get("/operator/capacity").status_code == 404
    assert Client().get("/operator/capacity")["Location"] == "/login?next=/operator/capacity"


def _samples(count: int) -> None:
    now = timezone.now()
    for i in range(count):
        services.fragmentation_sample(now=now - timedelta(minutes=5 * i))


def test_the_queries_do_not_grow_with_the_fleet_or_the_samples(build: Builder) -> None:
    fleet = ready_fleet(nodes=2)
    client = Client()
    client.force_login(_operator(build))
    _samples(2)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/operator/capacity").status_code == 200
        return len(captured)

    small = queries()
    for i in range(8):
        with transaction.atomic():
            more, _ = fleet_node(fleet.cluster, f"more{i}", rack=None)
        put_in_state(more, NodeState.READY)
    _samples(12)
    assert FragmentationSample.objects.count() == 12 * 6
    assert queries() == small


def test_an_operator_sees_the_chart_in_chromium(
    page: Page, live_server: object, build: Builder
) -> None:
    base = str(live_server)
    ready_fleet(nodes=2)
    _samples(3)
    operator = _operator(build)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if _is_error(m) else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    sign_in(page, base, operator.email)
    page.goto(f"{base}/operator/capacity")

    canvas = page.locator("canvas[data-nc-fragmentation]")
    assert canvas.count() == 1
    assert canvas.get_attribute("role") == "img"
    assert page.evaluate("() => Chart.getChart(document.querySelector('canvas')) !== undefined")
    assert page.locator('tr[data-shape="8"] [data-figure="startable"]').inner_text() == "2"
    assert errors == []
    assert serious_violations(page) == []


def _is_error(message: ConsoleMessage) -> bool:
    """An error of the page's own (the browser's favicon request is nobody's page)."""
    return message.type == "error" and not message.location["url"].endswith("/favicon.ico")
