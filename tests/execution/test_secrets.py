"""A secret's value leaves the control plane in one place only: the agent's assignments.
Not in the log, not in another table, not in another response, not in a log line."""

from __future__ import annotations

import logging

import pytest
from django.db import connection

from tests.execution.conftest import Agent, Customer, secret, status, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

VALUE = "hf_0123456789abcdefSECRET"


def tables_holding(value: str) -> list[str]:
    """Every table a row of which, as text, holds ``value`` (the log's payloads and
    metadata, stored idempotent responses, the projections, the telemetry)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(
                f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s',
                [f"%{value}%"],
            )
            if cursor.fetchone()[0]:
                found.append(table)
    return found


def test_a_secrets_value_is_only_in_the_assignments_answer(
    agents: list[Agent], acme: Customer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret(acme, "HF_TOKEN", VALUE)
    workload = submit(acme, secrets=("HF_TOKEN",), env={"FOO": "bar"})
    (agent,) = [a for a in agents if a.assignments()["assignments"]]

    listed = agent.only()
    agent.report(listed["id"], "started", pid=1)
    agent.ship(listed["id"], 0, b"training\n")
    agent.report(listed["id"], "exited", exit_code=0)
    shown = [
        acme.client.get(f"/api/v1/workloads/{workload.pk}{path}").content.decode()
        for path in ("", "/events", "/assignments", "/logs")
    ]

    assert listed["env"]["HF_TOKEN"] == VALUE
    assert status(workload)[0] == "succeeded"
    assert "scheduler_workload" in tables_holding('"FOO"')  # the scan reads JSON too
    assert tables_holding(VALUE) == []
    assert [page for page in shown if VALUE in page] == []
    assert [r.getMessage() for r in caplog.records if VALUE in r.getMessage()] == []
