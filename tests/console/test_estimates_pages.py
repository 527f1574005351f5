"""Estimated starts on the workload pages, beside the pending reason: in the list and on a
workload's page, the basis in words, "can never start" when nothing could hold it; and the
words for durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from console.selectors.workloads import start_shown
from inventory import services as inventory
from inventory.lifecycle import NodeAction
from scheduler import services
from scheduler.models import Workload, WorkloadEstimate
from tests.builders import run
from tests.console.conftest import Member
from tests.scheduler.conftest import ready_fleet, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _client(member: Member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def _page(member: Member | Client, url: str) -> str:
    client = member if isinstance(member, Client) else _client(member)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_a_waiting_workload_shows_when_it_starts_in_the_list_and_on_its_page(
    member: Member, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    submitted(member.project, "blocker", gpus=8, runtime_estimate_s=2 * 3600)
    waiting = submitted(member.project, "waiting", gpus=8, runtime_estimate_s=600)
    services.workload_estimates_refresh(cluster_id=fleet.cluster.pk)

    listed = _page(member, "/workloads")
    body = _page(member, f"/workloads/{waiting.pk}?partial=status")

    # Without history a user's 2 h is expected to end after 1 h, from 24 min to 2 h.
    assert '<td class="nc-estimate"><span title="From the runtime estimates' in listed
    assert "Starts in about 1 h (24 min \N{EN DASH} 2 h)" in listed
    assert '<p id="nc-pending-reason">' in body
    assert '<p id="nc-estimate"><strong>Starts in about 1 h (24 min \N{EN DASH} 2 h)' in body
    assert "From the runtime estimates of the work ahead." in body


def test_a_workload_nothing_could_hold_says_it_can_never_start(
    member: Member, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    run(inventory.node_transition, node=fleet.nodes[0], action=NodeAction.CORDON)
    never = submitted(member.project, "never", gpus=8, nodes=2)
    services.workload_estimates_refresh(cluster_id=fleet.cluster.pk)

    body = _page(member, f"/workloads/{never.pk}")

    assert '<p id="nc-estimate" role="alert"><strong>Can never start: nothing in this' in body
    assert "no schedulable node of h100 here could hold what it asks for" in body
    assert "Can never start" in _page(member, "/workloads")


def test_the_list_reads_estimates_in_one_query_however_many_rows(
    member: Member, in_process: None, django_assert_max_num_queries: Any
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    submitted(member.project, "blocker", gpus=8, runtime_estimate_s=3600)
    submitted(member.project, "w0", gpus=8)
    services.workload_estimates_refresh(cluster_id=fleet.cluster.pk)
    client = _client(member)
    _page(client, "/workloads")  # the session's first use
    with django_assert_max_num_queries(9):
        few = _page(client, "/workloads")
    for i in range(1, 20):
        submitted(member.project, f"w{i}", gpus=8)
    services.workload_estimates_refresh(cluster_id=fleet.cluster.pk)
    with django_assert_max_num_queries(9):
        many = _page(client, "/workloads")
    assert few.count('class="nc-estimate"><span') == 1
    assert many.count('class="nc-estimate"><span') == 20


def _estimate(start: float | None, earliest: float | None, latest: float | None, *basis: str):  # type: ignore[no-untyped-def]
    def at(s: float | None) -> datetime | None:
        return None if s is None else NOW + timedelta(seconds=s)

    return WorkloadEstimate(
        estimated_start=at(start),
        earliest=at(earliest),
        latest=at(latest),
        basis=list(basis),
        computed_at=NOW,
        first_computed_at=NOW,
    )


@pytest.mark.parametrize(
    ("estimate", "line"),
    [
        pytest.param(
            _estimate(2400, 1200, 4200, "runtime_estimates"),
            "starts in about 40 min (20 min \N{EN DASH} 1 h 10)",
            id="minutes-and-hours",
        ),
        pytest.param(
            _estimate(30, 10, 90000, "learned_runtimes"),
            "starts in about under a minute (under a minute \N{EN DASH} 1 d 1 h)",
            id="seconds-to-a-day",
        ),
        pytest.param(
            _estimate(3 * 3600, 3600, None, "default_runtimes"),
            "starts in about 3 h (1 h \N{EN DASH} more than 7 days)",
            id="latest-beyond-the-horizon",
        ),
        pytest.param(_estimate(0, 0, 0, "now"), "should start in the next cycle", id="now"),
        pytest.param(
            _estimate(-420, -600, 60, "runtime_estimates"),
            f"expected by {NOW - timedelta(seconds=420):%H:%M} UTC, but the work ahead is"
            " running longer",
            id="passed",
        ),
        pytest.param(
            _estimate(None, None, None, "runtime_estimates", "beyond_horizon"),
            "not expected to start within the next 7 days",
            id="beyond-the-horizon",
        ),
        pytest.param(
            _estimate(None, None, None, "never"),
            "can never start: nothing in this cluster could ever hold it",
            id="never",
        ),
    ],
)
def test_the_start_in_words(estimate: WorkloadEstimate, line: str) -> None:
    workload = Workload(gpu_models=["h100"])
    assert start_shown(workload, estimate, NOW).line == line


def test_the_basis_in_words_names_what_it_waits_for() -> None:
    estimate = _estimate(600, 300, 900, "learned_runtimes", "quota", "reservation")
    shown = start_shown(Workload(gpu_models=["h100"]), estimate, NOW)
    assert shown.basis == (
        "From runtimes learned from past runs where no estimate was given;"
        " it waits for a reservation's window and its queue's quota."
    )
