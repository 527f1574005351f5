"""What the agent stops and starts, from the listing and its records alone."""

from __future__ import annotations

import pytest

from agent.notices import Notice
from agent.reconcile import Assignment, decide
from agent.state import ENDED, EXITING, RUNNING, RunRecord


def record(
    ident: str, phase: str = RUNNING, gpus: tuple[int, ...] = (), **fields: object
) -> RunRecord:
    return RunRecord(assignment_id=ident, runtime="process", phase=phase, gpus=list(gpus), **fields)  # type: ignore[arg-type]


def run(ident: str, *gpus: int, last_seq: int = 0) -> Assignment:
    return Assignment(id=ident, desired="run", gpus=list(gpus), last_seq=last_seq)


def stop(ident: str, last_seq: int = 1) -> Assignment:
    return Assignment(id=ident, desired="stop", last_seq=last_seq)


def test_a_listed_run_without_a_record_is_started() -> None:
    plan = decide([run("a", 0)], {}, accepting=True)

    assert ([a.id for a in plan.starts], plan.stops, plan.deferred) == (["a"], [], [])


def test_an_assignment_is_never_started_twice() -> None:
    records = {"a": record("a", ENDED), "b": record("b", RUNNING)}

    plan = decide([run("a"), run("b")], records, accepting=True)

    assert (plan.starts, plan.stops, plan.forgotten) == ([], [], [])


@pytest.mark.parametrize("listing", [[], [stop("a")]], ids=["no-longer-listed", "listed-as-stop"])
def test_a_run_not_listed_as_run_is_stopped(listing: list[Assignment]) -> None:
    plan = decide(listing, {"a": record("a")}, accepting=True)

    assert plan.stops == ["a"]


def test_a_stop_already_asked_for_is_not_asked_again() -> None:
    plan = decide([], {"a": record("a", stop_requested_at=1.0)}, accepting=True)

    assert plan.stops == []


def test_a_start_on_gpus_a_stopping_run_holds_waits_for_the_stop() -> None:
    records = {"old": record("old", RUNNING, gpus=(0, 1))}

    plan = decide([run("new", 1), run("other", 2)], records, accepting=True)

    assert (plan.stops, plan.deferred, [a.id for a in plan.starts]) == (["old"], ["new"], ["other"])


def test_gpus_of_a_run_that_ended_are_free() -> None:
    plan = decide([run("new", 0)], {"old": record("old", EXITING, gpus=(0,))}, accepting=True)

    assert [a.id for a in plan.starts] == ["new"]


def test_nothing_new_starts_when_work_is_not_accepted() -> None:
    plan = decide([run("a")], {"b": record("b")}, accepting=False)

    assert (plan.starts, plan.stops) == ([], ["b"])


@pytest.mark.parametrize(
    "assignment", [run("a", last_seq=1), stop("a")], ids=["listed-run", "listed-stop"]
)
def test_a_run_the_control_plane_knows_but_the_state_dir_does_not_is_lost(
    assignment: Assignment,
) -> None:
    plan = decide([assignment], {}, accepting=True)

    assert ([a.id for a in plan.forgotten], plan.starts) == (["a"], [])


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"id": "../etc", "desired": "run"}, "id"),
        ({"id": "a", "desired": "maybe"}, "desired"),
        ({"id": "a", "desired": "run", "argv": "sh"}, "argv"),
        ({"id": "a", "desired": "run", "env": {"A": 1}}, "env"),
        ({"id": "a", "desired": "run", "gpus": [{"uuid": "x"}]}, "index"),
    ],
    ids=["path-in-id", "desired", "argv", "env", "gpu-without-index"],
)
def test_an_assignment_the_agent_cannot_act_on_is_refused(data: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Assignment.parse(data)


# --- Preemption with notice, and resume (issue 32) ---
NOTICE = Notice(reason="preempted", deadline="2026-01-01T00:00:30+00:00", grace_s=30.0)


@pytest.mark.parametrize(
    "desired", ["run", "stop"], ids=["max-runtime-ending-while-run", "preempted-stop"]
)
def test_a_noticed_run_is_told_instead_of_plainly_stopped(desired: str) -> None:
    noticed = Assignment(id="a", desired=desired, notice=NOTICE, last_seq=1)

    plan = decide([noticed], {"a": record("a")}, accepting=True)

    assert ([a.id for a in plan.notices], plan.stops) == (["a"], [])


def test_a_notice_already_acted_on_is_not_given_again() -> None:
    noticed = Assignment(id="a", desired="stop", notice=NOTICE, last_seq=1)

    plan = decide([noticed], {"a": record("a", stop_requested_at=1.0)}, accepting=True)

    assert (plan.notices, plan.stops) == ([], [])


@pytest.mark.parametrize(
    ("notice", "error"),
    [({"reason": "bored"}, "notice"), ({"reason": "preempted", "grace_s": -1}, "grace_s")],
    ids=["unknown-reason", "negative-grace"],
)
def test_a_notice_the_agent_cannot_act_on_is_refused(notice: object, error: str) -> None:
    data = {"id": "a", "desired": "run", "notice": notice}

    with pytest.raises(ValueError, match=error):
        Assignment.parse(data)


def test_the_restarts_and_notice_of_a_listing_are_read() -> None:
    data = {"id": "a", "desired": "run", "restarts": 2, "notice": NOTICE.__dict__}

    parsed = Assignment.parse(data)

    assert (parsed.restarts, parsed.notice) == (2, NOTICE)
