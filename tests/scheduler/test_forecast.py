"""Start-time forecasts: the engine run forward, on hand-made cases and random scenarios."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given

from scheduler.engine import Allocation, Node, Placement, Policy, Request, Snapshot, schedule
from scheduler.engine.arrivals import EXPECTED, Outlook, expected_arrivals, replayed
from scheduler.engine.forecast import Basis, Horizon, Runtime, forecast
from scheduler.engine.model import Reservation
from scheduler.engine.runtimes import DEFAULT, ESTIMATE_RATIOS, RunSample, RuntimeBook
from tests.strategies import NOW, SETTINGS, scenarios

NODE = Node("n0", "h100", (0,) * 8, cpu_milli=64_000, memory_mib=262_144)


def _running(workload: str, gpus: int, started_at: float) -> Allocation:
    placement = Placement("n0", tuple(range(gpus)), 1000, 0, 0)
    return Allocation(workload, "q", "h100", (placement,), started_at=started_at)


def _exact(seconds: dict[str, float]) -> Callable[[str], Runtime]:
    return lambda workload: Runtime(
        seconds[workload], seconds[workload], seconds[workload], Basis.LEARNED_RUNTIMES
    )


def test_a_workload_behind_one_that_ends_starts_when_it_ends() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW - 100),))
    waiting = Request("next", "q", gpus_per_node=8)

    estimates = forecast(snapshot, [waiting], Policy(), NOW, _exact({"busy": 1000, "next": 50}))

    estimate = estimates["next"]
    assert estimate.start == NOW + 900
    assert estimate.earliest == estimate.latest == NOW + 900
    assert Basis.LEARNED_RUNTIMES in estimate.basis


def test_the_range_spans_the_runtimes_percentiles() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW),))
    waiting = Request("next", "q", gpus_per_node=8)
    spread = Runtime(1000, 500, 3000, Basis.RUNTIME_ESTIMATES)

    estimate = forecast(snapshot, [waiting], Policy(), NOW, lambda _: spread)["next"]

    assert (estimate.earliest, estimate.start, estimate.latest) == (
        NOW + 500,
        NOW + 1000,
        NOW + 3000,
    )


def test_the_range_follows_the_chain_of_work_each_start_waits_for() -> None:
    """The second in line waits for the first, which waits for the running work: its range is
    that chain with every runtime at its 10th, then its 90th percentile."""
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW),))
    first = Request("first", "q", gpus_per_node=8, submitted_at=NOW - 2)
    second = Request("second", "q", gpus_per_node=8, submitted_at=NOW - 1)
    spread = Runtime(1000, 500, 3000, Basis.RUNTIME_ESTIMATES)

    estimates = forecast(snapshot, [second, first], Policy(), NOW, lambda _: spread)

    assert (estimates["second"].earliest, estimates["second"].start) == (NOW + 1000, NOW + 2000)
    assert estimates["second"].latest == NOW + 6000


def test_work_that_fits_now_starts_now_and_the_line_after_it_waits_its_turn() -> None:
    snapshot = Snapshot((NODE,))
    first = Request("first", "q", gpus_per_node=8, submitted_at=NOW - 2)
    second = Request("second", "q", gpus_per_node=8, submitted_at=NOW - 1)

    estimates = forecast(
        snapshot, [second, first], Policy(), NOW, _exact({"first": 600, "second": 1})
    )

    assert estimates["first"].start == NOW
    assert estimates["first"].basis == (Basis.NOW,)
    assert estimates["second"].start == NOW + 600


def test_work_no_node_could_ever_hold_says_so() -> None:
    snapshot = Snapshot((NODE,))
    too_big = Request("too-big", "q", gpus_per_node=8, nodes=2)
    wrong_model = Request("wrong-model", "q", gpu_models=("a100",))

    estimates = forecast(snapshot, [too_big, wrong_model], Policy(), NOW, lambda _: DEFAULT)

    for workload in ("too-big", "wrong-model"):
        assert estimates[workload].start is None
        assert estimates[workload].basis == (Basis.NEVER,)


def test_work_beyond_the_horizon_has_no_time() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW),))
    waiting = Request("next", "q", gpus_per_node=8)

    estimate = forecast(
        snapshot, [waiting], Policy(), NOW, _exact({"busy": 7200, "next": 1}), Horizon(max_s=3600)
    )["next"]

    assert estimate.start is None
    assert Basis.BEYOND_HORIZON in estimate.basis


def test_a_reservation_closing_is_an_instant_of_the_forecast() -> None:
    """Work that would still run when another queue's window opens waits until it closes."""
    window = Reservation("r", "owner", "h100", 8, starts_at=NOW + 300, ends_at=NOW + 5000)
    policy = Policy(reservations=(window,))
    waiting = Request("long", "q", gpus_per_node=8, runtime_estimate_s=3600)

    estimate = forecast(Snapshot((NODE,)), [waiting], policy, NOW, lambda _: DEFAULT)["long"]

    assert estimate.start == NOW + 5000
    assert Basis.RESERVATION in estimate.basis


def test_a_more_urgent_arrival_before_the_running_work_ends_goes_first() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW - 100),))
    waiting = Request("next", "q", gpus_per_node=8, submitted_at=NOW)
    urgent = Request("~urgent", "q", gpus_per_node=8, priority=10, submitted_at=NOW + 500)
    runtimes = _exact({"busy": 1100, "next": 50, "~urgent": 400})

    alone = forecast(snapshot, [waiting], Policy(), NOW, runtimes)
    behind = forecast(snapshot, [waiting], Policy(), NOW, runtimes, arrivals=[urgent])

    assert alone["next"].start == NOW + 1000
    assert behind["next"].start == NOW + 1000 + 400  # the arrival runs first, for its runtime
    assert set(behind) == {"next"}  # an expected arrival has no estimate of its own


def test_a_less_urgent_arrival_waits_behind() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW - 100),))
    waiting = Request("next", "q", gpus_per_node=8, priority=5, submitted_at=NOW)
    later = [
        Request("~same", "q", gpus_per_node=8, priority=5, submitted_at=NOW + 500),
        Request("~lower", "q", gpus_per_node=8, priority=0, submitted_at=NOW + 200),
    ]
    runtimes = _exact({"busy": 1100, "next": 50, "~same": 400, "~lower": 400})

    estimates = forecast(snapshot, [waiting], Policy(), NOW, runtimes, arrivals=later)

    assert estimates["next"].start == NOW + 1000


def test_arrivals_at_or_before_now_are_not_expected() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW - 100),))
    waiting = Request("next", "q", gpus_per_node=8, submitted_at=NOW)
    past = Request("~past", "q", gpus_per_node=8, priority=10, submitted_at=NOW)
    runtimes = _exact({"busy": 1100, "next": 50, "~past": 400})

    estimates = forecast(snapshot, [waiting], Policy(), NOW, runtimes, arrivals=[past])

    assert estimates["next"].start == NOW + 1000


def test_an_expected_arrival_needs_an_id_of_its_own() -> None:
    waiting = Request("next", "q", gpus_per_node=8, submitted_at=NOW)
    clash = replace(waiting, submitted_at=NOW + 10)

    with pytest.raises(ValueError, match="its own"):
        forecast(Snapshot((NODE,)), [waiting], Policy(), NOW, lambda _: DEFAULT, arrivals=[clash])


def test_the_recent_past_is_expected_to_repeat() -> None:
    now = 10_000.0
    submitted = [
        Request("old", "q", submitted_at=now - 4000),  # before the window
        Request("b", "q", priority=10, submitted_at=now - 600),
        Request("a", "q", submitted_at=now - 1800),
        Request("future", "q", submitted_at=now + 5),  # not submitted yet
    ]
    outlook = Outlook(window_s=3600, look_ahead_s=7200, max_arrivals=10)

    arrivals = expected_arrivals(submitted, now, outlook)

    assert [(a.id, a.submitted_at) for a in arrivals] == [
        (f"{EXPECTED}1:a", now + 1800),
        (f"{EXPECTED}1:b", now + 3000),
        (f"{EXPECTED}2:a", now + 5400),
        (f"{EXPECTED}2:b", now + 6600),
    ]
    assert arrivals[1] == replace(submitted[1], id=f"{EXPECTED}1:b", submitted_at=now + 3000)
    assert [replayed(a.id) for a in arrivals] == ["a", "b", "a", "b"]
    assert expected_arrivals(reversed(submitted), now, outlook) == arrivals
    capped = expected_arrivals(submitted, now, replace(outlook, max_arrivals=3))
    assert capped == arrivals[:3]
    assert [a.id for a in expected_arrivals(submitted, now, outlook, min_priority=5)] == [
        f"{EXPECTED}1:b",
        f"{EXPECTED}2:b",
    ]


def test_a_short_log_is_replayed_over_what_it_covers_or_not_at_all() -> None:
    now = 10_000.0
    submitted = [Request("a", "q", submitted_at=now - 100)]
    outlook = Outlook(window_s=3600, look_ahead_s=3000, max_arrivals=100, min_window_s=600)

    covered = expected_arrivals(submitted, now, outlook, known_since=now - 1000)

    assert [a.submitted_at for a in covered] == [now + 900, now + 1900, now + 2900]
    assert expected_arrivals(submitted, now, outlook, known_since=now - 500) == []
    many = [Request(f"j{k}", "q", submitted_at=now - k) for k in range(1000)]
    assert len(expected_arrivals(many, now, replace(outlook, look_ahead_s=1e9))) == 100
    assert all(a.submitted_at > now for a in expected_arrivals(many, now, outlook))


@SETTINGS
@given(scenarios())
def test_the_forecasts_first_instant_is_the_engines_cycle(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    """What a cycle grants now is forecast to start now, and nothing else is; every estimate
    lies in its range and none is before now."""
    snapshot, pending, policy = scenario
    shaped = (
        replace(policy, typical_shapes=_typical(pending)) if not policy.typical_shapes else policy
    )
    granted = {a.workload for a in schedule(snapshot, pending, shaped, NOW).allocations}

    estimates = forecast(snapshot, pending, policy, NOW, lambda _: Runtime(600, 300, 1800))
    expected = [  # all of it again, sooner and more urgent: still after now
        replace(r, id=f"~{r.id}", submitted_at=NOW + 30.0 * (k + 1), priority=r.priority + 1)
        for k, r in enumerate(pending)
    ]
    expecting = forecast(
        snapshot, pending, policy, NOW, lambda _: Runtime(600, 300, 1800), arrivals=expected
    )

    assert set(estimates) == set(expecting) == {r.id for r in pending}
    assert {w for w, e in estimates.items() if e.start == NOW} == granted
    assert {w for w, e in expecting.items() if e.start == NOW} == granted
    for estimate in estimates.values():
        if estimate.start is not None:
            assert estimate.start >= NOW
            assert estimate.earliest is not None
            assert estimate.earliest <= estimate.start
            assert estimate.latest is None or estimate.start <= estimate.latest
        else:
            assert Basis.NEVER in estimate.basis or Basis.BEYOND_HORIZON in estimate.basis


def _typical(pending: list[Request]) -> dict[tuple[int, ...], float]:
    counts: dict[tuple[int, ...], float] = {}
    for request in pending:
        counts[request.shape] = counts.get(request.shape, 0.0) + 1.0
    return counts


def test_runtimes_come_from_the_closest_history_there_is() -> None:
    samples = [RunSample("p", (1, 1000, 1), d) for d in (100.0, 200.0, 300.0)]
    samples += [RunSample("p", (8, 1000, 1), d) for d in (5000.0, 6000.0, 7000.0)]
    samples += [RunSample("other", (1, 1000, 1), 10.0, array="a1")]
    book = RuntimeBook(samples)

    by_shape = book.runtime("p", (8, 1000, 1), None)
    assert (by_shape.expected_s, by_shape.basis) == (6000.0, Basis.LEARNED_RUNTIMES)
    assert by_shape.low_s < by_shape.expected_s < by_shape.high_s
    assert book.runtime("p", (2, 1000, 1), None).expected_s == 2650.0  # the project's median
    assert book.runtime("other", (1, 1000, 1), None, array="a1").expected_s == 10.0  # its array
    assert book.runtime("new", (4, 1000, 1), None).expected_s == 300.0  # the fleet's median
    assert RuntimeBook([]).runtime("new", (1, 1000, 1), None) == DEFAULT
    assert book.runtime("p", (8, 1000, 1), None, max_runtime_s=5500).high_s == 5500


def test_an_estimate_is_corrected_by_how_the_projects_estimates_compared_with_runs() -> None:
    samples = [RunSample("p", (1, 1000, 1), d, estimate_s=1000.0) for d in (250.0, 250.0, 250.0)]
    book = RuntimeBook(samples)

    corrected = book.runtime("p", (1, 1000, 1), 4000.0)
    assert (corrected.expected_s, corrected.basis) == (1000.0, Basis.RUNTIME_ESTIMATES)
    untaught = RuntimeBook([]).runtime("p", (1, 1000, 1), 4000.0)
    assert untaught.expected_s == 4000.0 * ESTIMATE_RATIOS[0]


def test_the_cyclic_collector_is_paused_for_the_forecast_and_back_after_it() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW),))
    waiting = Request("next", "q", gpus_per_node=8)
    collecting: list[bool] = []

    def runtime_of(workload: str) -> Runtime:
        collecting.append(gc.isenabled())
        return DEFAULT

    forecast(snapshot, [waiting], Policy(), NOW, runtime_of)
    assert collecting
    assert not any(collecting)
    assert gc.isenabled()

    late = replace(waiting, submitted_at=NOW + 60)
    with pytest.raises(ValueError, match="not its own"):
        forecast(snapshot, [waiting], Policy(), NOW, runtime_of, arrivals=[late])
    assert gc.isenabled()


def test_a_caller_that_paused_the_collector_finds_it_paused_after() -> None:
    snapshot = Snapshot((NODE,), (_running("busy", 8, NOW),))
    gc.disable()
    try:
        forecast(
            snapshot, [Request("next", "q", gpus_per_node=8)], Policy(), NOW, lambda _: DEFAULT
        )
        assert not gc.isenabled()
    finally:
        gc.enable()
