"""Work on a reservation is billed to the reservation, so the engine runs it only in the
reservation's window, on its GPU model, and within its GPUs, however much else is free (issue
30: a 1-GPU reservation let an 8-GPU job run at plan ``reserved``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import (
    Allocation,
    Decisions,
    Node,
    Policy,
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    schedule,
)
from scheduler.engine.cycle import Scheduler
from tests.builders.engine import job, nodes, running
from tests.strategies import MODELS, SETTINGS, fleets, requests

NOW = 100_000.0


def _policy(gpus: int, starts: float = NOW - 10, ends: float = NOW + 3600) -> Policy:
    return Policy(reservations=(Reservation("r1", "owner", "h100", gpus, starts, ends),))


def _on_r1(
    name: str,
    gpus: int,
    *,
    nodes: int = 1,
    min_nodes: int | None = None,
    queue: str = "owner",
    gpu_models: tuple[str, ...] = ("h100",),
) -> Request:
    """A job of the queue ``owner`` on reservation ``r1``, of h100 unless told."""
    return job(
        name,
        gpus,
        nodes=nodes,
        queue=queue,
        min_nodes=min_nodes,
        gpu_models=gpu_models,
        reservation="r1",
    )


def _decide(pending: list[Request], policy: Policy, busy: Sequence[Allocation] = ()) -> Decisions:
    fleet = nodes("n", 2, gpus=8) + nodes("l", 1, gpus=8, model="l4")
    return schedule(Snapshot(tuple(fleet), tuple(busy)), pending, policy, NOW)


def test_an_eight_gpu_job_on_a_one_gpu_reservation_waits_with_sixteen_free() -> None:
    decisions = _decide([_on_r1("big", 8)], _policy(1))

    assert decisions.allocations == ()
    reason = decisions.pending["big"]
    assert reason.code is ReasonCode.RESERVATION_FULL
    assert reason.message == "reservation r1 holds 1 GPU; 1 free on it, 8 asked"
    assert reason.figures == {"reservation": "r1", "gpus": 1, "free": 1.0, "asked": 8.0}


def test_two_jobs_that_each_fit_the_reservation_alone_do_not_both_start() -> None:
    pending = [_on_r1(name, 4) for name in ("a", "b")]

    decisions = _decide(pending, _policy(6))

    assert [a.workload for a in decisions.allocations] == ["a"]
    assert decisions.pending["b"].message == "reservation r1 holds 6 GPUs; 2 free on it, 4 asked"


def test_eviction_for_a_reservation_stops_at_the_gpus_it_holds() -> None:
    """Others' preemptible work fills the fleet: work on a 1-GPU reservation evicts for one
    GPU, and work asking more than the reservation holds evicts nobody."""
    others = [
        running(f"o{i}-{g}", f"n{i}", (g,), queue="other", preemptible=True)
        for i in range(2)
        for g in range(8)
    ]

    small = _decide([_on_r1("small", 1)], _policy(1), others)
    big = _decide([_on_r1("big", 4)], _policy(1), others)

    assert [a.workload for a in small.allocations] == ["small"]
    assert len(small.preemptions) == 1
    assert big.preemptions == ()
    assert big.pending["big"].code is ReasonCode.RESERVATION_FULL


def test_running_work_on_the_reservation_counts_and_its_end_frees_the_gpus() -> None:
    mine = running("old", "n0", (0, 1, 2, 3), queue="owner", reservation="r1")
    engine = Scheduler(Snapshot(tuple(nodes("n", 2, gpus=8)), (mine,)), _policy(6))
    pending = [_on_r1("new", 4)]

    first = engine.cycle(pending, NOW)
    engine.release(mine)
    second = engine.cycle(pending, NOW + 1)

    assert first.pending["new"].code is ReasonCode.RESERVATION_FULL
    assert [a.workload for a in second.allocations] == ["new"]


def test_an_elastic_gang_takes_as_many_nodes_as_the_reservation_holds() -> None:
    gang = _on_r1("gang", 2, nodes=4, min_nodes=1)

    (allocation,) = _decide([gang], _policy(3)).allocations

    assert allocation.gpu_milli == 2000  # one node of two GPUs: two would take four


@pytest.mark.parametrize(
    ("policy", "request_", "message"),
    [
        pytest.param(
            _policy(8, starts=NOW + 600),
            _on_r1("early", 1),
            "reservation r1 opens in 600 s",
            id="before-the-window",
        ),
        pytest.param(
            _policy(8, starts=NOW - 3600, ends=NOW),
            _on_r1("late", 1),
            "reservation r1 has ended",
            id="after-the-window",
        ),
        pytest.param(
            Policy(),
            _on_r1("gone", 1),
            "reservation r1 is not open: it ended or was cancelled",
            id="cancelled",
        ),
        pytest.param(
            _policy(8),
            _on_r1("other-model", 1, gpu_models=("l4",)),
            "reservation r1 holds h100, not l4",
            id="another-model",
        ),
        pytest.param(
            _policy(8),
            _on_r1("stranger", 1, queue="other"),
            "reservation r1 is not open: it ended or was cancelled",
            id="another-queue",
        ),
    ],
)
def test_work_on_a_reservation_runs_only_in_its_window_on_its_model(
    policy: Policy, request_: Request, message: str
) -> None:
    decisions = _decide([request_], policy)

    assert decisions.allocations == ()
    reason = decisions.pending[request_.id]
    assert (reason.code, reason.message) == (ReasonCode.OUTSIDE_RESERVATION, message)


def test_work_on_a_reservation_that_takes_any_model_lands_on_the_reservations() -> None:
    (allocation,) = _decide([_on_r1("any", 2, gpu_models=())], _policy(2)).allocations

    assert allocation.gpu_model == "h100"


@SETTINGS
@given(
    fleet=fleets(),
    first=requests("a"),
    then=requests("b"),
    gpus=st.integers(1, 8),
    model=st.sampled_from(MODELS),
    opens_in=st.sampled_from([-100.0, 0.0, 100.0]),
    on_it=st.lists(st.booleans(), min_size=20, max_size=20),
)
def test_work_on_a_reservation_never_holds_more_than_it_outside_its_window_or_model(
    fleet: tuple[Node, ...],
    first: list[Request],
    then: list[Request],
    gpus: int,
    model: str,
    opens_in: float,
    on_it: list[bool],
) -> None:
    reservation = Reservation("res", "qa", model, gpus, NOW + opens_in, NOW + 3600)
    engine = Scheduler(Snapshot(fleet), Policy(reservations=(reservation,)))
    held: dict[str, Allocation] = {}
    for at, batch in ((NOW, first), (NOW + 1, then)):
        pending = [
            replace(r, queue="qa", reservation="res") if on_it[i] else r
            for i, r in enumerate(batch)
        ]
        decisions = engine.cycle(pending, at)
        for victim in decisions.preemptions:
            held.pop(victim.victim, None)
        held.update({a.workload: a for a in decisions.allocations})
        on_reservation = [a for a in held.values() if a.reservation == "res"]
        if at < reservation.starts_at:
            assert on_reservation == []
        assert {a.gpu_model for a in on_reservation} <= {model}
        assert sum(a.gpu_milli for a in on_reservation) <= gpus * 1000
