"""The drain confirm page's preview: what draining the node would do to the waiting work's
start estimates, before confirming, nothing written; staff only."""

from __future__ import annotations

import pytest
from django.test import Client

from events import store
from inventory.lifecycle import NodeState
from inventory.models import Node
from scheduler.models import Workload
from tenants.models import User
from tests.console.conftest import Member
from tests.console.test_operator import _client, operator  # noqa: F401  (a fixture)
from tests.scheduler.conftest import Tenant
from tests.scheduler.test_what_if import _queue_waiting_for_the_short_node

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
HTMX = {"HX-Request": "true"}


def test_the_drain_page_offers_a_preview_and_shows_the_delay_it_would_cause(
    operator: User,  # noqa: F811
    member: Member,
    in_process: None,
) -> None:
    _, soon, _, _ = _queue_waiting_for_the_short_node(Tenant(member.organization, member.project))
    client = _client(operator)
    page = client.get(f"/operator/nodes/{soon}/drain").content.decode()
    assert "Preview its effect on waiting work" in page
    assert "would start later" not in page  # not computed until asked
    head = store.head_position()

    preview = client.get(f"/operator/nodes/{soon}/drain?preview=1", headers=HTMX)

    body = preview.content.decode()
    assert preview.status_code == 200
    assert "1 of 1 waiting workload would start later, by up to " in body
    assert '<th scope="row">next</th>' in body
    assert " later</td>" in body
    assert store.head_position() == head
    assert Node.objects.get(pk=soon).state == NodeState.READY
    assert Workload.objects.filter(status="running").count() == 2
    # Only a drain has a preview.
    assert "Preview its effect" not in client.get(f"/operator/nodes/{soon}/cordon").content.decode()


def test_no_one_but_staff_gets_the_preview(member: Member, in_process: None) -> None:
    _, soon, _, _ = _queue_waiting_for_the_short_node(Tenant(member.organization, member.project))
    client = Client()
    client.force_login(member.user)
    assert client.get(f"/operator/nodes/{soon}/drain?preview=1").status_code == 404
