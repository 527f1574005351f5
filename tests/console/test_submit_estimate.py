"""The new-workload form's "When would it start?": per GPU model, the start, its range and the
price an hour, before submitting, nothing written; refusals beside their inputs."""

from __future__ import annotations

import pytest
from django.test import Client

from billing.services.prices import default_price_set
from events import store
from scheduler.models import Workload
from tests.builders import Builder, run
from tests.console.conftest import Member, Role, member_of
from tests.console.test_submit import HTMX, _busy, _form, _signed_in
from tests.scheduler.conftest import ready_fleet

pytestmark = pytest.mark.django_db

ESTIMATE = "/workloads/new/estimate"


@pytest.mark.django_db(transaction=True)
def test_the_estimate_partial_shows_each_model_with_its_start_range_and_price(
    member: Member, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    run(default_price_set, gpu_model="h100", price_per_gpu_hour_minor=250, currency="USD")
    _busy(member, 8)  # every GPU busy for 10 min by its estimate
    client = _signed_in(member)
    assert "When would it start?" in client.get("/workloads/new").content.decode()
    head = store.head_position()

    response = client.post(ESTIMATE, _form(member, gpus_per_node="4"), headers=HTMX)

    body = response.content.decode()
    assert response.status_code == 200
    assert body.startswith('<form id="nc-workload-form"')
    assert "<h2>When it would start</h2>" in body
    assert "4 x h100 in about " in body
    assert '<td data-figure="when">In about ' in body
    assert " UTC</td>" in body  # the range
    assert '<td data-figure="price">USD 10.00 an hour</td>' in body
    assert "the runtime estimates of the work ahead" in body
    assert store.head_position() == head
    assert Workload.objects.count() == 1


def test_a_refused_estimate_for_htmx_is_the_form_with_its_errors(member: Member) -> None:
    ready_fleet(nodes=2, gpus=4)

    body = (
        _signed_in(member)
        .post(ESTIMATE, _form(member, gpus_per_node="2", nodes="3"), headers=HTMX)
        .content.decode()
    )

    # Only two nodes: a three-node job is refused as a submission would be.
    assert 'id="id_gpus_per_node_error"' in body
    assert "Not estimated: fix what is marked first." in body


def test_without_htmx_it_is_the_whole_page_and_a_refusal_is_a_400(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)
    client = _signed_in(member)
    page = client.post(ESTIMATE, _form(member))
    assert page.status_code == 200
    assert b"<h1>New workload</h1>" in page.content
    assert b'<td data-figure="when">Now</td>' in page.content
    assert b"no price listed" in page.content
    assert client.post(ESTIMATE, _form(member, gpus_per_node="16")).status_code == 400


def test_a_viewer_gets_403(build: Builder, member: Member) -> None:
    ready_fleet(nodes=1)
    viewer = member_of(build, member.organization, Role.VIEWER, "viewer@acme.test")
    client = Client()
    client.force_login(viewer)
    assert client.post(ESTIMATE, _form(member)).status_code == 403
