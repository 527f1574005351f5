"""The new-workload page: a custom or offering workload submitted through the API's service,
the dry run's answer in plain words, refusals beside their inputs with nothing written, and
only members who may submit reach it. Django's client for most, Chromium for the flow."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from playwright.sync_api import Page, expect

from events import store
from scheduler import services, tasks
from scheduler.models import Workload, WorkloadWait
from tests.builders import Builder, commerce, run
from tests.console.conftest import Member, Role, member_of, serious_violations, sign_in
from tests.scheduler.conftest import job, ready_fleet

pytestmark = pytest.mark.django_db

NEW, CHECK = "/workloads/new", "/workloads/new/check"
HTMX = {"HX-Request": "true"}


def _signed_in(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def _form(member: Member, **fields: Any) -> dict[str, Any]:
    """What the page posts for a custom workload, the page's defaults for the rest."""
    return {
        "project": str(member.project.pk),
        "name": "train",
        "offering": "",
        "gpu_model_1": "h100",
        "gpu_model_2": "",
        "gpu_model_3": "",
        "gpus_per_node": "1",
        "nodes": "1",
        "min_nodes": "",
        "gpu_milli": "1000",
        "topology": "any",
        "priority_class": "standard",
        "runtime_estimate_s": "",
        "image": "",
        "command": "",
        **fields,
    }


def _busy(member: Member, *gpus: int) -> None:
    """Running work of ``gpus`` GPUs each (the scheduler runs in process)."""
    for i, count in enumerate(gpus):
        workload = run(
            services.workload_submit,
            project=member.project,
            spec=job(f"busy{i}", gpus=count, runtime_estimate_s=600),
        )
        assert Workload.objects.get(pk=workload.pk).status == "running"


def test_a_custom_workload_is_submitted_with_exactly_what_the_form_asked(member: Member) -> None:
    ready_fleet(nodes=2, gpus=8)
    client = _signed_in(member)
    page = client.get(NEW)
    assert page.status_code == 200
    assert b'name="command"' in page.content

    response = client.post(
        NEW,
        _form(
            member,
            name="llm",
            gpus_per_node="4",
            nodes="2",
            min_nodes="1",
            topology="same_rack",
            preemptible="on",
            priority_class="high",
            runtime_estimate_s="3600",
            image="ghcr.io/acme/train:1.2",
            command="python\ntrain.py\n--lr 3e-4\n\n",
        ),
    )

    workload = Workload.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/workloads/{workload.pk}"
    assert (workload.project_id, workload.organization_id) == (
        member.project.pk,
        member.organization.pk,
    )
    assert (workload.name, workload.kind, workload.gpu_models) == ("llm", "job", ["h100"])
    assert (workload.gpus_per_node, workload.nodes, workload.min_nodes) == (4, 2, 1)
    assert (workload.gpu_milli, workload.topology) == (1000, "same_rack")
    assert (workload.priority_class, workload.priority) == ("high", 200)
    assert (workload.preemptible, workload.price_plan) == (True, "preemptible")
    assert workload.runtime_estimate_s == 3600
    assert workload.image == "ghcr.io/acme/train:1.2"
    assert workload.command == ["python", "train.py", "--lr 3e-4"]
    assert (workload.env, workload.secrets, workload.offering) == ({}, [], "")


def test_models_are_kept_in_order_of_preference_and_a_share_of_one_gpu_is_asked(
    member: Member,
) -> None:
    commerce.shop()
    _signed_in(member).post(
        NEW, _form(member, gpu_model_1="l4", gpu_model_2="h100", gpu_milli="250")
    )
    workload = Workload.objects.get()
    assert (workload.gpu_models, workload.gpu_milli) == (["l4", "h100"], 250)


def test_a_workload_from_an_offering_takes_the_offerings_shape(member: Member) -> None:
    commerce.shop()
    response = _signed_in(member).post(
        NEW, _form(member, offering="8xh100", gpu_model_1="", gpus_per_node="2")
    )
    workload = Workload.objects.get()
    assert response["Location"] == f"/workloads/{workload.pk}"
    assert (workload.offering, workload.gpus_per_node, workload.gpu_models) == (
        "8xh100",
        8,
        ["h100"],
    )


BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    # field posted, the input the error shows beside, and the error's words
    "no-gpus": ({"gpus_per_node": "0"}, "gpus_per_node", "greater than or equal to 1"),
    "not-a-number": ({"gpus_per_node": "four"}, "gpus_per_node", "Enter a whole number"),
    "bigger-than-any-node": ({"gpus_per_node": "16"}, "gpus_per_node", "largest node: 8 GPUs"),
    "no-name": ({"name": ""}, "name", "This field is required"),
    "share-of-an-unshareable-model": (
        {"gpu_milli": "500"},
        "gpu_milli",
        "none of these GPU models can be shared",
    ),
    "the-same-model-twice": ({"gpu_model_2": "h100"}, "gpu_model_1", "h100 is given twice"),
    "a-bad-image": ({"image": "Not An Image"}, "image", "image"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_shows_its_error_beside_its_field_and_writes_nothing(
    case: str, member: Member
) -> None:
    fields, shown_at, words = BAD[case]
    ready_fleet(nodes=1, gpus=8)
    client = _signed_in(member)
    head = store.head_position()

    for url in (NEW, CHECK):
        response = client.post(url, _form(member, **fields))

        assert response.status_code == 400, url
        errors = re.search(
            rf'<ul class="errorlist" id="id_{shown_at}_error">(.*?)</ul>',
            response.content.decode(),
            re.DOTALL,
        )
        assert errors is not None, (url, response.content.decode()[:3000])
        assert words in errors[1], errors[1]
    assert store.head_position() == head
    assert not Workload.objects.exists()


def test_another_organizations_project_is_refused(build: Builder, member: Member) -> None:
    ready_fleet(nodes=1)
    theirs = build.project(build.organization("Globex"), "Secret")
    response = _signed_in(member).post(NEW, _form(member, project=str(theirs.pk)))
    assert response.status_code == 400
    assert b"Select a valid choice" in response.content
    assert not Workload.objects.exists()


def test_a_viewer_gets_403_and_nothing_is_written(build: Builder, member: Member) -> None:
    ready_fleet(nodes=1)
    viewer = member_of(build, member.organization, Role.VIEWER, "viewer@acme.test")
    client = Client()
    client.force_login(viewer)
    assert client.get(NEW).status_code == 403
    assert client.post(NEW, _form(member)).status_code == 403
    assert client.post(CHECK, _form(member)).status_code == 403
    assert b"New workload" not in client.get("/overview").content
    assert not Workload.objects.exists()


def test_the_check_partial_says_it_could_run_now_and_where(member: Member) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    head = store.head_position()

    response = _signed_in(member).post(CHECK, _form(member, gpus_per_node="4"), headers=HTMX)

    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body
    assert body.startswith('<form id="nc-workload-form"')
    assert "<h2>Could run now</h2>" in body
    assert f"<td>{fleet.nodes[0].name}</td><td>0, 1, 2, 3</td>" in body
    assert store.head_position() == head
    assert not Workload.objects.exists()


def test_the_check_page_without_htmx_is_the_whole_page(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)
    response = _signed_in(member).post(CHECK, _form(member))
    assert response.status_code == 200
    assert b"<h1>New workload</h1>" in response.content
    assert b"<h2>Could run now</h2>" in response.content


@pytest.mark.django_db(transaction=True)
def test_the_check_partial_says_why_not_in_the_words_a_submission_then_waits_with(
    member: Member, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    _busy(member, 6, 6)
    client = _signed_in(member)
    asked = _form(member, gpus_per_node="4", topology="single_node")

    body = client.post(CHECK, asked, headers=HTMX).content.decode()

    assert "<h2>Would wait</h2>" in body
    assert "The free GPUs are spread over too many nodes." in body
    assert '<th scope="row">most on one node</th><td>2</td>' in body
    assert Workload.objects.count() == 2
    client.post(NEW, asked)
    wait = WorkloadWait.objects.get()
    assert wait.code == "fragmented"
    assert wait.message in body


def test_a_refused_check_for_htmx_is_the_form_with_its_errors(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)
    response = _signed_in(member).post(CHECK, _form(member, gpus_per_node="16"), headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200  # htmx swaps it in
    assert 'id="id_gpus_per_node_error"' in body
    assert "Not checked: fix what is marked first." in body


def test_the_page_costs_the_same_queries_however_many_choices(
    build: Builder, member: Member
) -> None:
    commerce.shop()
    client = _signed_in(member)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(NEW).status_code == 200
        return len(captured)

    few = queries()
    for i in range(5):
        build.project(member.organization, f"P{i}")
        commerce.offering(f"extra{i}", "instance", gpus_per_node=1)
    assert queries() == few


@pytest.mark.django_db(transaction=True)
def test_a_member_checks_then_submits_in_the_browser(
    page: Page, live_server: object, member: Member, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    _busy(member, 6, 6)  # 2 + 2 GPUs free
    base = str(live_server)
    sign_in(page, base, member.user.email)
    page.get_by_role("link", name="New workload").click()
    expect(page.get_by_role("heading", name="New workload")).to_be_visible()
    assert serious_violations(page) == []

    page.get_by_label("Name").fill("too-big")
    page.get_by_label("GPU model, first choice").select_option("h100")
    page.get_by_label("GPUs per node").fill("4")
    page.get_by_label("Topology").select_option("single_node")
    page.get_by_role("button", name="Check").click()
    expect(page.get_by_role("heading", name="Would wait")).to_be_visible()
    expect(page.locator("#nc-check")).to_contain_text(
        "4 free h100 in cluster, at most 2 on one node, needs 4 on one node"
    )
    assert serious_violations(page) == []

    page.get_by_label("Name").fill("small")
    page.get_by_label("GPUs per node").fill("2")
    page.get_by_label("Runtime estimate (seconds)").fill("0.5")
    page.get_by_role("button", name="Check").click()
    expect(page.get_by_role("heading", name="Could run now")).to_be_visible()
    page.get_by_role("button", name="When would it start?").click()
    expect(page.get_by_role("heading", name="When it would start")).to_be_visible()
    expect(page.locator("#nc-estimate")).to_contain_text("2 x h100 now")
    assert serious_violations(page) == []
    assert Workload.objects.count() == 2  # checks and estimates write nothing

    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/workloads/[0-9a-f-]{36}$"))
    workload = Workload.objects.get(name="small")
    assert page.url.endswith(f"/workloads/{workload.pk}")
    assert (workload.gpus_per_node, workload.topology) == (2, "single_node")
    # Then it runs and ends, and the page follows without a reload.
    expect(page.locator("#nc-status")).to_have_text("running")
    page.evaluate("window.ncSamePage = true")
    time.sleep(0.6)
    tasks.tick()  # beat's tick ends the run once its runtime is up
    expect(page.locator("#nc-status")).to_have_text("succeeded", timeout=10_000)
    assert page.evaluate("window.ncSamePage") is True
    workload.refresh_from_db()
    assert workload.status == "succeeded"
