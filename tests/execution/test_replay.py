"""The assignments are a projection: a replay of the log rebuilds them exactly, and leaves
the output (telemetry, not events) where it was."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.forms.models import model_to_dict

from execution.models import Assignment, AssignmentOutput, LogChunk
from tests.execution.conftest import Agent, Customer, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def assignments() -> list[dict[str, Any]]:
    return [
        model_to_dict(a) | {"created_at": a.created_at} for a in Assignment.objects.order_by("pk")
    ]


def output() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    chunks = LogChunk.objects.order_by("id").values_list("id", "assignment_id", "offset", "data")
    outputs = AssignmentOutput.objects.order_by("pk").values_list(
        "pk", "next_offset", "stored_bytes", "truncated_bytes", "dropped_bytes"
    )
    return [(*c[:3], bytes(c[3])) for c in chunks], list(outputs)


@pytest.mark.parametrize("projection", ["execution.assignments", None], ids=["own", "all"])
def test_a_replay_rebuilds_the_assignments_as_they_were(
    agents: list[Agent], acme: Customer, projection: str | None
) -> None:
    submit(acme, gpus=8, nodes=2, retry_limit=1)
    for agent in agents:
        listed = agent.only()
        agent.report(listed["id"], "started", pid=10 + listed["rank"], cgroups={"applied": True})
        agent.ship(
            listed["id"], 0, b"step 1\n", dropped=[{"assignment_id": listed["id"], "bytes": 3}]
        )
    failing = agents[0]
    failing.report(failing.only()["id"], "exited", exit_code=2, message="boom")
    for agent in agents:  # the survivor stops; the retry starts on both again
        for listed in agent.assignments()["assignments"]:
            if listed["desired"] == "stop":
                agent.report(listed["id"], "exited", signal=15)
    live, kept = assignments(), output()
    assert len(live) == 4

    call_command("replay", *([projection] if projection else []), verbosity=0)

    assert assignments() == live
    assert output() == kept
