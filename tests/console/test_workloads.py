"""The workload pages: the list's filters and scope, a workload's placement, why it waits, its
output and assignments, cancel and who may; with Django's client, and in Chromium the live
page following a job from waiting to running to succeeded, and a cancel from the page."""

from __future__ import annotations

import dataclasses
import html
import re
import time
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from events.models import Event
from execution.models import Assignment
from scheduler import services, tasks
from scheduler.models import Allocation, Workload, WorkloadStatus
from tenants.models import Project
from tests.builders import Builder, client_with_key, run
from tests.console.conftest import Member, Role, member_of, serious_violations, sign_in
from tests.execution.conftest import Agent, agent_driver, agents
from tests.scheduler.conftest import GpuFleet, job, model_node, ready_fleet

__all__ = ["agent_driver", "agents"]

pytestmark = pytest.mark.django_db
live = pytest.mark.django_db(transaction=True)


def _submit(
    project: Project, name: str = "train", models: tuple[str, ...] = ("h100",), **fields: Any
) -> Workload:
    spec = dataclasses.replace(job(name, **fields), gpu_models=models)
    workload: Workload = run(services.workload_submit, project=project, spec=spec)
    return Workload.objects.get(pk=workload.pk)


def _client(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def _page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.content.decode()[:2000]
    return response.content.decode()


def _listed(body: str) -> list[str]:
    """The names of the workloads the list shows, in order."""
    return re.findall(r'<a href="/workloads/[0-9a-f-]{36}">([^<]+)</a>', body)


def _api(build: Builder, member: Member) -> Any:
    _, secret = build.key(member.organization, member.user)
    return client_with_key(secret)


def _a100_node(fleet: GpuFleet) -> None:
    model_node(fleet, "a100", cpu_milli=64_000, memory_mib=524_288, rack=fleet.nodes[0].rack)


# --- the list --------------------------------------------------------------------------------


def test_the_list_filters_by_project_status_and_model_newest_first_within_the_organization(
    build: Builder, member: Member
) -> None:
    fleet = ready_fleet(nodes=1)
    _a100_node(fleet)
    serving = build.project(member.organization, "Serving")
    _submit(member.project, "first")
    second = _submit(member.project, "second")
    _submit(serving, "third", models=("a100", "h100"))
    _submit(serving, "fourth", models=("a100",))
    run(services.workload_cancel, workload=second)
    globex = build.organization("Globex")
    theirs = _submit(build.project(globex, "Secret"), "theirs")
    client = _client(member)

    assert _listed(_page(client, "/workloads")) == ["fourth", "third", "second", "first"]
    assert _listed(_page(client, f"/workloads?project={serving.pk}")) == ["fourth", "third"]
    assert _listed(_page(client, "/workloads?status=cancelled")) == ["second"]
    assert _listed(_page(client, "/workloads?gpu_model=a100")) == ["fourth", "third"]
    assert _listed(_page(client, "/workloads?gpu_model=h100&status=pending")) == [
        "third",
        "first",
    ]
    row = _page(client, f"/workloads?project={member.project.pk}&status=pending")
    assert '<td class="nc-status">pending</td>' in row
    assert "<td>1 GPU x 1 node</td>" in row
    # Another organization's project is no choice, and its workload no row nor page.
    assert "Any project" in _page(client, f"/workloads?project={theirs.project_id}", 400)
    assert "theirs" not in _page(client, "/workloads?status=pending")
    _page(client, f"/workloads/{theirs.pk}", 404)
    _page(client, f"/workloads/{theirs.pk}?partial=status", 404)
    assert client.post(f"/workloads/{theirs.pk}/cancel").status_code == 404
    assert Workload.objects.get(pk=theirs.pk).status == WorkloadStatus.PENDING


def test_the_list_pages_50_at_a_time_and_costs_the_same_queries_for_3_rows_as_for_60(
    member: Member, django_assert_max_num_queries: Any
) -> None:
    ready_fleet(nodes=1)
    client = _client(member)
    for i in range(3):
        _submit(member.project, f"w{i:02d}")
    with django_assert_max_num_queries(9):  # and the estimates of the rows that wait
        assert len(_listed(_page(client, "/workloads"))) == 3
    for i in range(3, 60):
        _submit(member.project, f"w{i:02d}")
    with django_assert_max_num_queries(9):  # and the estimates of the rows that wait
        first = _page(client, "/workloads")
    assert _listed(first) == [f"w{i:02d}" for i in range(59, 9, -1)]
    assert 'href="?page=2" rel="next">Older' in first
    assert _listed(_page(client, "/workloads?page=2")) == [f"w{i:02d}" for i in range(9, -1, -1)]


# --- a workload's page -----------------------------------------------------------------------


@live
def test_the_page_draws_the_exact_placement_and_its_timeline(
    member: Member, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    first = _submit(member.project, "first", gpus=6, runtime_estimate_s=600)
    workload = _submit(member.project, "second", gpus=4, runtime_estimate_s=600)
    assert workload.status == WorkloadStatus.RUNNING
    (part,) = Allocation.objects.get(workload=workload, released_at=None).placements
    (beside,) = Allocation.objects.get(workload=first, released_at=None).placements
    assert part["node"] != beside["node"]

    body = _page(_client(member), f"/workloads/{workload.pk}")

    assert '<strong id="nc-status" class="nc-status">running</strong>' in body
    indices = ", ".join(str(g) for g in sorted(part["gpus"]))
    row = f'<th scope="row">{part["node"]}</th>\n        <td class="nc-indices">{indices}</td>'
    assert row in body
    drawn = rf'<ol class="nc-gpus" aria-label="GPUs of {part["node"]}">(.*?)</ol>'
    boxes = re.search(drawn, body, re.S)
    assert boxes is not None
    held = [int(i) for i in re.findall(r'nc-held">(\d+)<small>held</small>', boxes[1])]
    free = [int(i) for i in re.findall(r'<li class="nc-gpu">(\d+)</li>', boxes[1])]
    assert held == sorted(part["gpus"])
    assert sorted(held + free) == list(range(8))
    assert {str(n.name) for n in fleet.nodes} >= {part["node"]}
    timeline = re.findall(r"</time></td><td>([^<]+)</td><td>([^<]*)</td>", body)
    placed = f"on {part['node']} (GPUs {', '.join(str(g) for g in part['gpus'])})"
    assert timeline == [
        ("Submitted", "asks for 4 GPU(s) x 1 node(s) of h100, priority class standard"),
        ("Placed, provisioning", placed),
        ("Running", ""),
    ]
    assert f'hx-get="/workloads/{workload.pk}?partial=status" hx-trigger="every 2s"' in body


@live
def test_a_workload_that_cannot_fit_shows_the_engines_reason_and_its_place_in_line(
    build: Builder, member: Member, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    # 6 busy on each node: 2 + 2 free cannot take a 4-GPU single-node job.
    for name in ("left", "right"):
        _submit(member.project, name, gpus=6, runtime_estimate_s=600)
    too_big = _submit(member.project, "too-big", gpus=4, topology="single_node")
    behind = _submit(member.project, "behind", gpus=4, topology="single_node")
    said = _api(build, member).get(f"/api/v1/workloads/{too_big.pk}").json()
    assert said["status"] in {"pending", "admitted"}
    reason = said["pending_reason"]
    assert reason["code"] == "fragmented", reason

    body = _page(_client(member), f"/workloads/{too_big.pk}?partial=status")

    assert f'<p id="nc-pending-reason">{html.escape(reason["message"])}</p>' in body
    assert "<dt>Needed</dt><dd>4</dd>" in body
    assert "<dt>Free</dt><dd>4</dd>" in body
    assert "<dt>Most on one node</dt><dd>2</dd>" in body
    assert '<strong id="nc-queue-position">1</strong>' in body
    behind_body = _page(_client(member), f"/workloads/{behind.pk}")
    assert '<strong id="nc-queue-position">2</strong>' in behind_body
    assert "No GPUs placed yet." in body


@live
def test_a_member_cancels_and_a_viewer_sees_no_button_and_is_refused(
    build: Builder, member: Member, in_process: None
) -> None:
    ready_fleet(nodes=1)
    workload = _submit(member.project, "long", runtime_estimate_s=600)
    viewer = _client(
        Member(
            member_of(build, member.organization, Role.VIEWER, "viewer@acme.test"),
            member.organization,
            member.project,
        )
    )
    url = f"/workloads/{workload.pk}"
    assert "Cancel workload" not in _page(viewer, url)
    events = Event.objects.count()

    forged = viewer.post(f"{url}/cancel")

    assert forged.status_code == 403
    assert 'role="alert" id="nc-error">not allowed to workload.write' in forged.content.decode()
    assert Workload.objects.get(pk=workload.pk).status == WorkloadStatus.RUNNING
    assert Event.objects.count() == events

    owner = _client(member)
    assert "Cancel workload" in _page(owner, url)
    done = owner.post(f"{url}/cancel", follow=True)
    assert done.redirect_chain == [(url, 302)]
    body = done.content.decode()
    assert '<strong id="nc-status" class="nc-status">cancelled</strong>' in body
    assert "Workload long cancelled." in body
    assert "Cancel workload" not in body
    assert 'hx-trigger="every 2s"' not in body  # final: nothing to follow
    fresh = Workload.objects.get(pk=workload.pk)
    assert (fresh.status, fresh.allocation_id) == (WorkloadStatus.CANCELLED, None)
    assert Allocation.objects.get(workload=fresh).release_reason == "cancelled"
    again = owner.post(f"{url}/cancel")  # a resend: still cancelled, nothing more
    assert again.status_code == 302
    assert Event.objects.filter(stream_id=str(workload.pk)).count() == 5


@live
@pytest.mark.postgres
def test_the_page_shows_assignments_and_output_and_follows_it_from_the_cursor(
    member: Member, agents: list[Agent], settings: Any
) -> None:
    workload = _submit(
        member.project, "train", command=("python", "train.py"), runtime_estimate_s=None
    )
    (agent,) = [a for a in agents if a.assignments()["assignments"]]
    assignment = agent.only()["id"]
    agent.report(assignment, "started", pid=7)
    agent.ship(assignment, 0, b"step 1 <ok>\n")
    client = _client(member)
    url = f"/workloads/{workload.pk}"

    body = _page(client, url)

    assert '<code id="nc-command">python train.py</code>' in body
    row = f"<td>{agent.node.name}</td>\n        <td>0</td>\n        <td>running</td>"
    assert row in body
    cursor = re.search(r"partial=logs&amp;cursor=(\d+)", body)
    assert cursor is not None
    assert 'aria-labelledby="nc-logs-heading">step 1 &lt;ok&gt;\n<span hx-get=' in body
    agent.ship(assignment, 12, b"step 2\n")
    follow = f"{url}?partial=logs&cursor={cursor[1]}"
    more = _page(client, follow)
    assert re.fullmatch(
        rf'step 2\n<span hx-get="{url}\?partial=logs&amp;cursor=\d+" hx-trigger="every 2s"'
        r' hx-swap="outerHTML"></span>',
        more,
    ), more

    agent.report(assignment, "exited", exit_code=0)
    assert Workload.objects.get(pk=workload.pk).status == WorkloadStatus.SUCCEEDED
    assert _page(client, follow) == "step 2\n"  # complete: no poller left
    body = _page(client, url)
    assert "<td>exited</td>\n        <td>0</td>" in body
    assert "step 1 &lt;ok&gt;\nstep 2\n</pre>" in body
    assert Assignment.objects.get(pk=assignment).exit_code == 0
    _page(client, f"{url}?partial=logs&cursor=x", 400)


NOT_POSITIONS = [
    pytest.param("x", id="not-digits"),
    pytest.param("\N{SUPERSCRIPT TWO}", id="a-digit-to-isdigit-not-to-int"),
    pytest.param("9" * 4301, id="more-digits-than-int-reads"),
    pytest.param(str(2**63), id="past-a-bigint"),
    pytest.param("-1", id="negative"),
]


@pytest.mark.parametrize("cursor", NOT_POSITIONS)
def test_a_logs_cursor_that_is_not_a_position_is_a_400(member: Member, cursor: str) -> None:
    ready_fleet(nodes=1)
    workload = _submit(member.project)

    response = _client(member).get(
        f"/workloads/{workload.pk}", {"partial": "logs", "cursor": cursor}
    )

    assert response.status_code == 400
    assert response.content.decode() == "cursor: not a position"


@live
def test_the_page_costs_the_same_queries_for_a_short_timeline_as_for_a_long_one(
    member: Member, in_process: None, django_assert_max_num_queries: Any
) -> None:
    ready_fleet(nodes=2, gpus=8)
    workload = _submit(member.project, "service", gpus=8, nodes=2, runtime_estimate_s=600)
    client = _client(member)
    url = f"/workloads/{workload.pk}"
    with django_assert_max_num_queries(13):
        _page(client, url)
    for i in range(30):
        run(
            services.workload_endpoints_set,
            workload=Workload.objects.get(pk=workload.pk),
            endpoints=[{"port": 8000, "address": f"10.0.0.{i}:8000", "node": "fra1-n00"}],
        )
    with django_assert_max_num_queries(13):
        body = _page(client, url)
    assert body.count("<td>Reachable</td>") == 30
    with django_assert_max_num_queries(10):
        _page(client, f"{url}?partial=status")


# --- in Chromium -----------------------------------------------------------------------------


@live
def test_the_page_follows_a_job_from_waiting_to_running_to_succeeded_and_cancels_from_the_page(
    page: Page, live_server: Any, member: Member, in_process: None
) -> None:
    base = str(live_server)
    ready_fleet(nodes=1, gpus=8)
    blocker = _submit(member.project, "blocker", gpus=8, runtime_estimate_s=600)
    watched = _submit(member.project, "watched", gpus=8, runtime_estimate_s=0.5)
    assert watched.status in {WorkloadStatus.PENDING, WorkloadStatus.ADMITTED}
    services.workload_estimates_refresh(cluster_id=watched.cluster_id)
    sign_in(page, base, member.user.email)

    page.goto(f"{base}/workloads")
    expect(page.get_by_role("link", name="watched")).to_be_visible()
    assert serious_violations(page) == []
    page.get_by_role("link", name="watched").click()
    expect(page.locator("#nc-status")).to_have_text(re.compile("^(pending|admitted)$"))
    expect(page.locator("#nc-pending-reason")).to_contain_text("needs 8 h100, 0 free")
    expect(page.locator("#nc-queue-position")).to_have_text("1")
    # No history: the blocker's 10 min are expected to end after 5.
    expect(page.locator("#nc-estimate")).to_contain_text(re.compile(r"Starts in about [45] min"))
    assert serious_violations(page) == []
    page.evaluate("window.ncNotReloaded = true")

    other = page.context.new_page()
    other.goto(f"{base}/workloads/{blocker.pk}")
    expect(other.locator("#nc-status")).to_have_text("running")
    other.get_by_role("button", name="Cancel workload").click()
    expect(other.locator("#nc-status")).to_have_text("cancelled")
    expect(other.get_by_role("status")).to_have_text("Workload blocker cancelled.")
    expect(other.get_by_role("button", name="Cancel workload")).to_have_count(0)
    assert Workload.objects.get(pk=blocker.pk).status == WorkloadStatus.CANCELLED

    # The blocker's GPUs went to the watched job; its page follows without a reload.
    expect(page.locator("#nc-status")).to_have_text("running", timeout=10_000)
    held = Allocation.objects.get(workload=watched, released_at=None)
    expect(page.locator(".nc-held")).to_have_count(len(held.placements[0]["gpus"]))
    deadline = timezone.now().timestamp() + 10
    while Workload.objects.get(pk=watched.pk).status != WorkloadStatus.SUCCEEDED:
        assert timezone.now().timestamp() < deadline, "the run did not end"
        time.sleep(0.2)
        tasks.tick()
    expect(page.locator("#nc-status")).to_have_text("succeeded", timeout=10_000)
    expect(page.locator("#nc-timeline")).to_contain_text("Succeeded")
    assert page.evaluate("window.ncNotReloaded") is True
    assert serious_violations(page) == []
