"""Output: the agent ships chunks at byte offsets (PROTOCOL §4), the customer reads them
back (§5)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from pytest_django.fixtures import Settings

from execution.models import AssignmentOutput, LogChunk
from tests.builders import Builder
from tests.execution.conftest import Agent, Customer, customer_of, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def running(agents: list[Agent], acme: Customer) -> tuple[Agent, str, str]:
    """A started job: its agent, its assignment's id and the workload's id."""
    workload = submit(acme)
    (agent,) = [a for a in agents if a.assignments()["assignments"]]
    assignment = agent.only()["id"]
    agent.report(assignment, "started", pid=1)
    return agent, assignment, str(workload.pk)


def stored(assignment: str) -> list[tuple[int, bytes]]:
    return [
        (c.offset, bytes(c.data))
        for c in LogChunk.objects.filter(assignment_id=assignment).order_by("id")
    ]


def next_offset(response: Any, assignment: str) -> int:
    assert response.status_code == 200, response.json()
    return int(response.json()["next_offset"][assignment])


def test_chunks_in_order_are_stored_and_a_resend_once(running: tuple[Agent, str, str]) -> None:
    agent, assignment, _ = running

    first = next_offset(agent.ship(assignment, 0, b"hello "), assignment)
    second = next_offset(agent.ship(assignment, 6, b"world\n"), assignment)
    resent = next_offset(agent.ship(assignment, 0, b"hello "), assignment)

    assert (first, second, resent) == (6, 12, 12)
    assert stored(assignment) == [(0, b"hello "), (6, b"world\n")]


def test_a_chunk_straddling_the_mark_stores_only_its_tail(
    running: tuple[Agent, str, str],
) -> None:
    agent, assignment, _ = running
    agent.ship(assignment, 0, b"abcd")

    after = next_offset(agent.ship(assignment, 2, b"cdef"), assignment)

    assert after == 6
    assert stored(assignment) == [(0, b"abcd"), (4, b"ef")]


def test_a_chunk_past_a_gap_is_not_stored_and_the_agent_is_told_where_to_rewind(
    running: tuple[Agent, str, str],
) -> None:
    agent, assignment, _ = running
    agent.ship(assignment, 0, b"abcd")

    after = next_offset(agent.ship(assignment, 10, b"later"), assignment)

    assert after == 4
    assert stored(assignment) == [(0, b"abcd")]


def test_past_the_workloads_cap_output_is_counted_not_stored(
    running: tuple[Agent, str, str], settings: Settings
) -> None:
    settings.LOG_MAX_BYTES_PER_WORKLOAD = 10
    agent, assignment, _ = running
    agent.ship(assignment, 0, b"12345678")

    after = next_offset(agent.ship(assignment, 8, b"abcdef"), assignment)
    agent.ship(assignment, 14, b"xyz", dropped=[{"assignment_id": assignment, "bytes": 50}])
    agent.ship(assignment, 17, b"", dropped=[{"assignment_id": assignment, "bytes": 20}])

    assert after == 14
    assert stored(assignment) == [(0, b"12345678"), (8, b"ab")]
    output = AssignmentOutput.objects.get(assignment_id=assignment)
    assert (output.next_offset, output.truncated_bytes, output.dropped_bytes) == (17, 7, 50)


def test_a_chunk_for_another_nodes_assignment_is_400(
    running: tuple[Agent, str, str], agents: list[Agent]
) -> None:
    agent, assignment, _ = running
    (other,) = [a for a in agents if a is not agent]

    response = other.ship(assignment, 0, b"x")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_assignment"
    assert stored(assignment) == []


def test_data_that_is_not_base64_is_400(running: tuple[Agent, str, str]) -> None:
    agent, assignment, _ = running
    chunk = {"assignment_id": assignment, "offset": 0, "data": "not base64!"}

    response = agent.client.post(agent.url("logs"), {"chunks": [chunk]}, format="json")

    assert response.status_code == 400
    assert "chunks" in response.json()["error"]["fields"]


def test_the_customer_reads_the_output_page_by_page(
    running: tuple[Agent, str, str], acme: Customer
) -> None:
    agent, assignment, workload = running
    agent.ship(assignment, 0, b"one\n")
    agent.ship(assignment, 4, b"two\n")
    agent.ship(assignment, 8, "dr\u00e9i\n".encode())

    page = acme.get(f"workloads/{workload}/logs", limit=2).json()
    rest = acme.get(f"workloads/{workload}/logs", cursor=page["cursor"]).json()

    assert [(e["offset"], e["text"], e["rank"]) for e in page["entries"]] == [
        (0, "one\n", 0),
        (4, "two\n", 0),
    ]
    assert [e["text"] for e in rest["entries"]] == ["dr\u00e9i\n"]
    assert rest["entries"][0]["node"] == agent.node.name
    assert (page["complete"], rest["complete"]) == (False, False)


def test_the_output_is_complete_once_the_workload_ended(
    running: tuple[Agent, str, str], acme: Customer
) -> None:
    agent, assignment, workload = running
    agent.ship(assignment, 0, b"done\n")
    agent.report(assignment, "exited", exit_code=0)

    logs = acme.get(f"workloads/{workload}/logs").json()

    assert logs["complete"] is True
    assert [e["text"] for e in logs["entries"]] == ["done\n"]


def test_follow_answers_when_a_chunk_arrives(
    running: tuple[Agent, str, str], acme: Customer
) -> None:
    agent, assignment, workload = running
    cursor = acme.get(f"workloads/{workload}/logs").json()["cursor"]

    def later() -> None:
        time.sleep(0.5)
        agent.ship(assignment, 0, b"late\n")
        connection.close()

    shipper = threading.Thread(target=later)
    shipper.start()
    followed = acme.get(f"workloads/{workload}/logs", cursor=cursor, follow="true", wait=20)
    shipper.join()

    assert [e["text"] for e in followed.json()["entries"]] == ["late\n"]


def test_follow_answers_empty_after_the_wait(
    running: tuple[Agent, str, str], acme: Customer
) -> None:
    _, _, workload = running

    began = time.monotonic()
    followed = acme.get(f"workloads/{workload}/logs", follow="true", wait=1).json()

    assert followed["entries"] == []
    assert followed["cursor"] == "0"
    assert time.monotonic() - began >= 0.8


@pytest.mark.parametrize("what", ["logs", "assignments"])
def test_another_tenant_gets_404(
    running: tuple[Agent, str, str], build: Builder, what: str
) -> None:
    _, _, workload = running
    globex = customer_of(build, "Globex")

    response = globex.get(f"workloads/{workload}/{what}")

    assert response.status_code == 404


@pytest.mark.parametrize(
    ("params", "field"),
    [({"cursor": "abc"}, "cursor"), ({"wait": "31"}, "wait"), ({"limit": "0"}, "limit")],
    ids=["cursor", "wait", "limit"],
)
def test_bad_log_parameters_are_400(
    running: tuple[Agent, str, str], acme: Customer, params: dict[str, str], field: str
) -> None:
    _, _, workload = running

    response = acme.get(f"workloads/{workload}/logs", **params)

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]


def test_a_misspelt_follow_is_refused_with_the_hint(
    running: tuple[Agent, str, str], acme: Customer
) -> None:
    """As every query parameter nothing reads (tests/api/test_bad_input.py); here, since the
    long poll reads on its own threads, whose connections see committed rows only."""
    _, _, workload = running

    response = acme.get(f"workloads/{workload}/logs", folow="true")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_field"
    assert error["fields"] == {"folow": ["Unknown field. Did you mean follow?"]}
