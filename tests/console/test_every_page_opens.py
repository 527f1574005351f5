"""Every console page and every operator page opens on both databases, the embedded default
(SQLite, in-process tasks) included: a node's page read its allocations with a JSON lookup
SQLite lacks, a 500 for every node there, and node actions redirect to it. A page added to
the console is walked here, or named among the POST-only ones: a test says so."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.urls import resolve
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from billing.models import Invoice
from console.urls import urlpatterns
from orders import services as orders
from tenants import services as tenants
from tenants.access import Actor
from tests.billing.conftest import History
from tests.billing.test_invoices import at, close
from tests.builders import Builder, commerce, run
from tests.builders.history import SchedulingLog
from tests.console.conftest import Member, Role

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

# Answer POST only (GET is a 405): nothing to open.
POST_ONLY = {
    "sign-out",
    "switch",
    "workload-cancel",
    "workload-check",
    "workload-estimate",
    "reservation-create",
    "reservation-cancel",
    "member-role",
    "member-remove",
    "invitation-revoke",
    "api-key-revoke",
    "invoice-pay",
    "budget-clear",
    "verify-email-resend",
    "ssh-key-remove",
}


@dataclass
class World:
    """A member's organization with a workload running on the first node, a closed month's
    invoice and an invitation out; an order waiting for an operator's approval."""

    member: Member
    nodes: list[uuid.UUID]
    workload: uuid.UUID
    invoice: Invoice
    invitation_token: str
    order: uuid.UUID


@pytest.fixture
def world(build: Builder, member: Member) -> World:
    shop = commerce.shop()
    history = History(project=member.project, cluster_id=shop.cluster.pk)
    history.run(at(3), at(3, 4))
    close()
    now = timezone.now()
    running = SchedulingLog(member.project, shop.cluster.pk)
    workload = running.submit(now, name="big-train")
    running.grant(workload, now, [(4, 1000)], nodes=[shop.nodes[0].pk])
    _, token = run(
        tenants.invitation_create,
        actor=Actor(user=member.user),
        organization=member.organization,
        email="new@acme.test",
        role=Role.MEMBER,
    )
    run(orders.approval_threshold_set, threshold_gpus=0)
    order = commerce.order(member.project, "1xh100")
    invoice = Invoice.objects.get(organization=member.organization)
    nodes = [node.pk for node in shop.nodes]
    return World(member, nodes, workload, invoice, token, order.pk)


def _member_pages(world: World) -> list[str]:
    invoice = world.invoice.pk
    return [
        "/",
        "/overview",
        "/workloads",
        f"/workloads/{world.workload}",
        "/workloads/new",
        "/queues",
        "/reservations",
        "/usage",
        "/usage.csv",
        "/organization",
        "/organization/members",
        "/organization/keys",
        "/organization/audit",
        "/billing",
        f"/billing/invoices/{invoice}",
        f"/billing/invoices/{invoice}/document",
        "/billing/card",
        "/billing/budgets",
        "/account/ssh-keys",
        "/workloads/new-dev",
    ]


def _anonymous_pages(world: World) -> list[str]:
    user = world.member.user
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return [
        "/login",
        "/password-reset",
        "/password-reset/sent",
        f"/password-reset/{uid}/{default_token_generator.make_token(user)}",
        "/password-reset/done",
        f"/invitations/{world.invitation_token}",
        "/signup",
        f"/verify-email/{tenants.email_verification_token(user)}",
    ]


def _operator_pages(world: World) -> list[str]:
    node, order = world.nodes[0], world.order
    return [
        "/operator/",
        "/operator/fleet",
        "/operator/capacity",
        f"/operator/nodes/{node}",
        f"/operator/nodes/{node}/cordon",
        "/operator/queues",
        "/operator/orders",
        f"/operator/orders/{order}/approve",
        f"/operator/orders/{order}/reject",
        "/operator/dunning",
    ]


def _opened(client: Client, pages: list[str]) -> dict[str, int]:
    """Each page's status, following redirects (a password reset link redirects to its form)."""
    return {url: client.get(url, follow=True).status_code for url in pages}


def test_every_page_a_member_and_a_visitor_open_answers(world: World, settings: Any) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = True
    member = Client()
    member.force_login(world.member.user)
    member_pages, anonymous_pages = _member_pages(world), _anonymous_pages(world)

    assert _opened(member, member_pages) == dict.fromkeys(member_pages, 200)
    assert _opened(Client(), anonymous_pages) == dict.fromkeys(anonymous_pages, 200)


def test_every_operator_page_opens_and_a_node_shows_its_allocation(
    build: Builder, world: World
) -> None:
    operator = Client()
    operator.force_login(build.user("ops@neocloud.example", is_staff=True))
    pages = _operator_pages(world)
    busy, idle = world.nodes[0], world.nodes[1]

    opened = _opened(operator, pages)
    cordoned = operator.post(f"/operator/nodes/{idle}/cordon", {"reason": "fan"}, follow=True)

    assert opened == dict.fromkeys(pages, 200)
    shown = operator.get(f"/operator/nodes/{busy}").context["page"].allocations
    assert [(a.allocation.workload.name, a.gpus) for a in shown] == [("big-train", [0, 1, 2, 3])]
    assert cordoned.redirect_chain == [(f"/operator/nodes/{idle}", 302)]
    assert cordoned.status_code == 200
    assert cordoned.context["page"].allocations == []


def test_the_walk_covers_every_page_of_the_console(world: World) -> None:
    walked = _member_pages(world) + _anonymous_pages(world) + _operator_pages(world)

    every = {pattern.name for pattern in urlpatterns}

    assert {resolve(url).url_name for url in walked} == every - POST_ONLY
