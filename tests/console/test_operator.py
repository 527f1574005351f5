"""Operator pages: only staff see them (anyone else: a 404, a forged POST writes nothing); the
fleet map shows each GPU's exact state for a known fleet; a node's page lists its allocations
and history; cordon and order approval from the pages go through the services (events);
the queues page counts waiting workloads by reason code; bounded queries at two fleet sizes;
and, in Chromium, an operator cordons a node from the map."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from events import store
from events.models import Event
from events.store import ANY, Metadata
from inventory import events as inventory_events
from inventory.lifecycle import NodeState
from inventory.models import Node
from orders import services as orders
from orders.models import Order, OrderStatus
from scheduler.models import Workload, WorkloadWait
from tenants.models import Organization, User
from tests.builders import Builder, commerce, run
from tests.builders.fleet import put_in_state
from tests.builders.history import SchedulingLog
from tests.console.conftest import PASSWORD, Member, serious_violations, sign_in
from tests.scheduler.conftest import GpuFleet, ready_fleet

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator(build: Builder) -> User:
    user = build.user("ops@neocloud.example", is_staff=True)
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    return user


def _fail_gpu(node: Node, index: int) -> None:
    store.append(
        inventory_events.NODE_STREAM,
        str(node.pk),
        [inventory_events.GpuFailed(index=index, reason="xid 79")],
        expected_version=ANY,
        metadata=Metadata(actor="system:tests"),
    )


@dataclass
class KnownFleet:
    fleet: GpuFleet
    tenant: Organization
    log: SchedulingLog


def _known_fleet(build: Builder, nodes: int = 3) -> KnownFleet:
    """n00: Xylo's allocation on GPUs 0-3 and GPU 7 failed; n01: a half GPU shared on GPU 0;
    n02 cordoned; any further nodes free."""
    fleet = ready_fleet(nodes=nodes, gpus=8)
    xylo = build.organization("Xylo")
    log = SchedulingLog(build.project(xylo, "Train"), fleet.cluster.pk)
    now = timezone.now()
    whole = log.submit(now, name="big-train")
    log.grant(whole, now, [(4, 1000)], nodes=[fleet.nodes[0].pk])
    half = log.submit(now, name="notebook")
    log.grant(half, now, [(1, 500)], nodes=[fleet.nodes[1].pk])
    _fail_gpu(fleet.nodes[0], 7)
    put_in_state(fleet.nodes[2], NodeState.CORDONED)
    return KnownFleet(fleet, xylo, log)


def _states(html: str, node: str) -> dict[int, tuple[str, str]]:
    """GPU index → (data-state, label) of ``node`` on a page."""
    found = re.findall(
        rf'data-gpu="{node}:(\d+)" data-state="(\w+)">GPU \d+<small>([^<]*)</small>', html
    )
    return {int(i): (state, label) for i, state, label in found}


# --- who may ---------------------------------------------------------------------------------


def _pages(fleet: KnownFleet, order: Order | None = None) -> list[str]:
    node = fleet.fleet.nodes[0].pk
    order_id = order.pk if order else uuid.uuid4()
    return [
        "/operator/",
        "/operator/fleet",
        f"/operator/nodes/{node}",
        f"/operator/nodes/{node}/cordon",
        f"/operator/nodes/{node}/decommission",
        "/operator/queues",
        "/operator/orders",
        f"/operator/orders/{order_id}/approve",
        f"/operator/orders/{order_id}/reject",
        "/operator/dunning",
    ]


def test_no_one_but_staff_sees_an_operator_page_or_acts(build: Builder, member: Member) -> None:
    known = _known_fleet(build)
    outsider = build.user("someone@else.test")
    customer, nobody = _client(member.user), _client(outsider)
    before = Event.objects.count()

    for url in _pages(known):
        assert customer.get(url).status_code == 404, url
        assert nobody.get(url).status_code == 404, url
        assert customer.post(url, {"reason": "forged"}).status_code == 404, url
        anonymous = Client().get(url)
        assert anonymous.status_code == 302, url
        assert anonymous["Location"].startswith("/login?next="), url

    assert Event.objects.count() == before
    assert Node.objects.get(pk=known.fleet.nodes[0].pk).state == NodeState.READY
    assert "/operator/" not in customer.get("/overview").content.decode()


def test_staff_see_the_operator_link(operator: User) -> None:
    assert 'href="/operator/">Operator</a>' in _client(operator).get("/overview").content.decode()


# --- the fleet map and a node ---------------------------------------------------------------


def test_the_fleet_map_shows_each_gpus_state(build: Builder, operator: User) -> None:
    known = _known_fleet(build)

    html = _client(operator).get("/operator/fleet").content.decode()

    allocated = ("allocated", "allocated to Xylo")
    free = ("free", "free")
    assert _states(html, "fra1-n00") == {
        **dict.fromkeys(range(4), allocated),
        **dict.fromkeys(range(4, 7), free),
        7: ("failed", "failed"),
    }
    assert _states(html, "fra1-n01") == {
        0: ("shared", "shared, 500m of 1000m used"),
        **dict.fromkeys(range(1, 8), free),
    }
    assert _states(html, "fra1-n02") == dict.fromkeys(range(8), ("cordoned", "free, node cordoned"))
    assert 'data-node="fra1-n02" data-node-state="cordoned"' in html
    assert html.count('data-domain="0"') == 3  # one NVLink domain per node
    for node in known.fleet.nodes:
        assert f'href="/operator/nodes/{node.pk}">{node.name}</a>' in html
    counts = dict(re.findall(r'data-count="(\w+)">(\d+)', html))
    assert counts == {"allocated": "4", "free": "10", "failed": "1", "shared": "1", "cordoned": "8"}


def test_a_nodes_page_lists_its_allocation_and_history(build: Builder, operator: User) -> None:
    known = _known_fleet(build)
    n00 = known.fleet.nodes[0]

    response = _client(operator).get(f"/operator/nodes/{n00.pk}")

    page = response.context["page"]
    assert [(a.allocation.workload.name, a.gpus, a.gpu_milli) for a in page.allocations] == [
        ("big-train", [0, 1, 2, 3], 1000)
    ]
    html = response.content.decode()
    assert '<th scope="row">big-train</th>' in html
    assert "<td>Xylo</td>" in html
    assert [m.said for m in page.history] == [
        "GPU 7 failed: xid 79",
        "test_setup: registered → ready (test set-up)",
        "registered as fra1-n00",
    ]
    assert "GPU 7 failed: xid 79" in html
    assert [a.value for a in page.actions] == ["cordon", "drain"]


def test_an_operator_cordons_a_node_after_confirming(build: Builder, operator: User) -> None:
    known = _known_fleet(build)
    n01 = known.fleet.nodes[1]
    client = _client(operator)

    confirm = client.get(f"/operator/nodes/{n01.pk}/cordon")
    assert confirm.status_code == 200
    assert "Cordon fra1-n01?" in confirm.content.decode()
    assert Node.objects.get(pk=n01.pk).state == NodeState.READY  # nothing yet

    done = client.post(f"/operator/nodes/{n01.pk}/cordon", {"reason": "bad fan"}, follow=True)

    assert done.redirect_chain == [(f"/operator/nodes/{n01.pk}", 302)]
    assert "Node fra1-n01: cordon done." in done.content.decode()
    event = Event.objects.filter(stream_type="node", stream_id=str(n01.pk)).last()
    assert event is not None
    assert (event.type, event.data) == (
        "inventory.NodeStateChanged",
        {"action": "cordon", "from_state": "ready", "to_state": "cordoned", "reason": "bad fan"},
    )
    assert event.metadata["actor"] == f"user:{operator.pk}"
    assert Node.objects.get(pk=n01.pk).state == NodeState.CORDONED


def test_an_action_the_state_refuses_writes_nothing(build: Builder, operator: User) -> None:
    known = _known_fleet(build)
    n00 = known.fleet.nodes[0]
    before = Event.objects.count()

    response = _client(operator).post(f"/operator/nodes/{n00.pk}/uncordon", {"reason": ""})

    assert response.status_code == 409
    assert "node fra1-n00 is ready: cannot uncordon" in response.content.decode()
    assert Event.objects.count() == before
    assert _client(operator).get(f"/operator/nodes/{n00.pk}/provision").status_code == 404


@pytest.mark.parametrize("nodes", [3, 9], ids=["3-nodes", "9-nodes"])
def test_fleet_pages_cost_the_same_queries_however_many_nodes(
    build: Builder, operator: User, nodes: int, django_assert_max_num_queries: object
) -> None:
    known = _known_fleet(build, nodes=nodes)
    client = _client(operator)
    with django_assert_max_num_queries(8):  # type: ignore[operator]
        assert client.get("/operator/fleet").status_code == 200
    with django_assert_max_num_queries(9):  # type: ignore[operator]
        assert client.get(f"/operator/nodes/{known.fleet.nodes[0].pk}").status_code == 200
    with django_assert_max_num_queries(12):  # type: ignore[operator]
        assert client.get("/operator/queues").status_code == 200


# --- queues ---------------------------------------------------------------------------------


def test_the_queues_page_counts_waiting_workloads_by_reason(build: Builder, operator: User) -> None:
    known = _known_fleet(build)
    now = timezone.now()
    waits = {"quota_exceeded": 2, "no_capacity": 1}
    for code, count in waits.items():
        for i in range(count):
            workload = known.log.submit(now - timedelta(hours=i + 1), name=f"{code}-{i}")
            WorkloadWait.objects.create(
                workload_id=workload,
                cluster_id=known.fleet.cluster.pk,
                code=code,
                message=code,
                updated_at=now,
            )
    known.log.submit(now, name="new")

    response = _client(operator).get("/operator/queues")

    found = response.context["found"]
    assert [(w.code, w.count) for w in found.waiting] == [
        ("quota_exceeded", 2),
        ("no_capacity", 1),
        ("not_considered", 1),
    ]
    oldest = Workload.objects.get(name="quota_exceeded-1").submitted_at
    assert found.waiting[0].oldest == oldest
    (queue,) = found.queues
    assert (queue.project.name, queue.depth, queue.running) == (
        "Train",
        4,
        2,
    )  # big-train and notebook hold GPUs
    assert [(m.gpu_model, m.held, m.quota) for m in queue.models] == [("h100", 4.5, None)]
    html = response.content.decode()
    assert re.search(
        r'data-code="quota_exceeded"><th scope="row"><code>quota_exceeded</code></th>'
        r'<td data-figure="count">2</td>',
        html,
    )


# --- orders ---------------------------------------------------------------------------------


def test_an_operator_approves_a_large_order_from_the_page(build: Builder, operator: User) -> None:
    commerce.shop()
    customer = commerce.customer(build)
    run(orders.approval_threshold_set, threshold_gpus=0)
    order = commerce.order(customer.project, "1xh100")
    assert order.status == OrderStatus.VALIDATED
    client = _client(operator)
    listed = client.get("/operator/orders").content.decode()
    assert f'data-order="{order.pk}"' in listed

    assert client.get(f"/operator/orders/{order.pk}/approve").status_code == 200
    done = client.post(f"/operator/orders/{order.pk}/approve", {"reason": ""}, follow=True)

    assert done.redirect_chain == [("/operator/orders", 302)]
    order.refresh_from_db()
    assert order.status == OrderStatus.FULFILLED
    assert Workload.objects.get(order_id=order.pk).pk == order.workload_id
    assert list(order.steps.values_list("status", "actor"))[2] == (
        OrderStatus.APPROVED,
        f"user:{operator.pk}",
    )
    assert f'data-order="{order.pk}"' not in done.content.decode()


def test_an_operator_rejects_an_order_with_a_reason(build: Builder, operator: User) -> None:
    commerce.shop()
    customer = commerce.customer(build)
    run(orders.approval_threshold_set, threshold_gpus=0)
    order = commerce.order(customer.project, "1xh100")

    _client(operator).post(f"/operator/orders/{order.pk}/reject", {"reason": "too large"})

    order.refresh_from_db()
    assert (order.status, order.status_reason) == (
        OrderStatus.REJECTED,
        "rejected_by_operator: too large",
    )


# --- in Chromium ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_operator_cordons_a_node_from_the_fleet_map(
    page: Page, live_server: object, build: Builder, operator: User
) -> None:
    base = str(live_server)
    known = _known_fleet(build)
    sign_in(page, base, operator.email)
    page.get_by_role("link", name="Operator").click()
    expect(page.get_by_role("heading", name="Fleet map")).to_be_visible()
    assert serious_violations(page) == []

    page.get_by_role("link", name="fra1-n01").click()
    expect(page.get_by_role("heading", name="Node fra1-n01")).to_be_visible()
    assert serious_violations(page) == []
    page.get_by_role("button", name="Cordon…").click()
    expect(page.get_by_role("heading", name="Cordon fra1-n01?")).to_be_visible()
    assert serious_violations(page) == []
    page.get_by_label("Reason").fill("bad fan")
    page.get_by_role("button", name="Cordon", exact=True).click()

    expect(page.get_by_role("status")).to_have_text("Node fra1-n01: cordon done.")
    expect(page.locator('[data-figure="state"]')).to_have_text("cordoned")
    assert Node.objects.get(pk=known.fleet.nodes[1].pk).state == NodeState.CORDONED
    for url in ("/operator/queues", "/operator/orders", "/operator/dunning"):
        page.goto(f"{base}{url}")
        assert serious_violations(page) == [], url
