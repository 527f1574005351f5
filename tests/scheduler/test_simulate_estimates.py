"""Start-time estimates measured in time mode: the noise model, the baselines, the figures."""

from __future__ import annotations

import io
import json
import statistics
from collections.abc import Iterable
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from scheduler.engine.arrivals import Outlook, expected_arrivals
from scheduler.engine.forecast import Basis, Runtime, forecast
from scheduler.engine.model import Allocation, Node, Placement, Policy, Request, Snapshot
from scheduler.engine.runtimes import RunSample, RuntimeBook
from scheduler.simulator import estimates, timed, workload

EXACT = workload.Noise(
    factor_median=1.0, factor_sigma=0.0, round_share=0.0, fail_share=0.0, early_share=0.0
)


def _jobs(count: int = 300, seed: int = 3) -> workload.Workload:
    return workload.synthetic(workload.SyntheticSpec(jobs=count, seed=seed))


def test_the_noise_is_reproducible_and_overestimates_in_the_median() -> None:
    jobs = _jobs()

    noisy = workload.with_noise(jobs, workload.Noise(seed=7))

    assert noisy == workload.with_noise(jobs, workload.Noise(seed=7))
    assert noisy != workload.with_noise(jobs, workload.Noise(seed=8))
    length = {j.request.id: j.runtime_s for j in jobs.jobs}
    factors = [(j.request.runtime_estimate_s or 0.0) / length[j.request.id] for j in noisy.jobs]
    assert statistics.median(factors) >= 1.8
    assert 0.7 < sum(f > 1 for f in factors) / len(factors) < 1.0  # most, not all, over
    shorter = sum(j.runtime_s < length[j.request.id] for j in noisy.jobs) / len(noisy.jobs)
    assert 0.12 < shorter < 0.28  # a tenth fail, a tenth end early
    rounded = sum(
        j.request.runtime_estimate_s in workload.ROUND_ESTIMATES_S for j in noisy.jobs
    ) / len(noisy.jobs)
    assert rounded > 0.4
    assert [j.arrival_s for j in noisy.jobs] == [j.arrival_s for j in jobs.jobs]


def test_without_noise_the_estimates_are_the_lengths_to_the_minute() -> None:
    jobs = _jobs(20)

    exact = workload.with_noise(jobs, EXACT)

    for before, after in zip(jobs.jobs, exact.jobs, strict=True):
        assert after.runtime_s == before.runtime_s
        assert 0 <= (after.request.runtime_estimate_s or 0.0) - before.runtime_s < 60


@pytest.mark.parametrize(
    ("position", "admissions", "now", "expected"),
    [
        pytest.param(3, [7000.0, 7100.0, 7200.0, 7300.0], 7400.0, 7400.0 + 3 * 900.0, id="hour"),
        pytest.param(2, [100.0, 200.0], 7200.0, 7200.0 + 2 * 3600.0, id="none-recent-all"),
        pytest.param(0, [3000.0], 3600.0, 3600.0, id="next-in-line"),
        pytest.param(4, [], 50.0, None, id="never-admitted"),
    ],
)
def test_depth_rate_is_depth_over_the_recent_admission_rate(
    position: int, admissions: list[float], now: float, expected: float | None
) -> None:
    assert estimates.depth_rate(position, admissions, now) == expected


def _one_gpu() -> Node:
    return Node("n", "h100", (0,), cpu_milli=8000, memory_mib=65536)


def _running(workload_id: str, started_at: float, estimate: float) -> Allocation:
    return Allocation(
        workload=workload_id,
        queue="q",
        gpu_model="h100",
        placements=(Placement("n", (0,), 1000, 0, 0),),
        started_at=started_at,
        ends_at=started_at + estimate,
    )


def test_the_backfill_plan_takes_the_users_estimates_at_face_value() -> None:
    snapshot = Snapshot((_one_gpu(),), (_running("a", 0.0, 600.0),))
    waiting = [Request("b", "q", runtime_estimate_s=300.0, submitted_at=10.0)]
    requests = {"a": Request("a", "q", runtime_estimate_s=600.0), "b": waiting[0]}

    plan = forecast(snapshot, waiting, Policy(), 10.0, lambda w: estimates.face_value(requests[w]))

    assert plan["b"].start == 600.0  # the user's 600 s, whatever history says
    assert estimates.face_value(waiting[0]).expected_s == 300.0


def test_one_running_job_of_known_runtime_gives_an_exact_estimate() -> None:
    book = RuntimeBook([RunSample("q", (1, 1000, 1), 100.0 * k, 100.0 * k) for k in (1, 2, 3)])
    snapshot = Snapshot((_one_gpu(),), (_running("a", 0.0, 500.0),))
    waiting = [Request("b", "q", runtime_estimate_s=60.0, project="q", submitted_at=40.0)]
    requests = {"a": Request("a", "q", runtime_estimate_s=500.0, project="q"), "b": waiting[0]}
    ran = {"a": 40.0}

    def learned(w: str) -> Runtime:
        r = requests[w]
        return book.runtime(r.project, r.shape, r.runtime_estimate_s, ran_s=ran.get(w, 0.0))

    start = forecast(snapshot, waiting, Policy(), 40.0, learned)["b"].start

    assert start == 500.0
    figures = estimates.accuracy([(start, 500.0, 40.0)])
    assert (figures.within_share, figures.within_60s_share, figures.median_abs_error_s) == (
        1.0,
        1.0,
        0.0,
    )


def test_work_that_outlived_its_expected_end_is_expected_as_the_longer_runs() -> None:
    book = RuntimeBook([RunSample("p", (1, 1000, 1), d, 1000.0) for d in (100, 200, 300, 800)])

    fresh = book.runtime("p", (1, 1000, 1), 1000.0)
    late = book.runtime("p", (1, 1000, 1), 1000.0, ran_s=400.0)
    beyond = book.runtime("p", (1, 1000, 1), 1000.0, ran_s=900.0)

    assert fresh.expected_s == 250.0
    assert late.expected_s == 800.0  # only the run longer than 400 s is like it
    # Longer than any: a heavy tail, expected to run half as long again as it has so far.
    assert beyond.expected_s == 900.0 * 1.5
    assert 900.0 < beyond.low_s < beyond.expected_s < beyond.high_s
    assert fresh.basis is late.basis is Basis.RUNTIME_ESTIMATES


def test_accuracy_counts_a_missing_estimate_as_a_miss() -> None:
    figures = estimates.accuracy([(None, 500.0, 0.0), (450.0, 500.0, 0.0), (900.0, 1000.0, 0.0)])

    assert figures.within_share == pytest.approx(2 / 3)  # 50 s <= 60 s; 100 s <= 20 % of 1000 s
    assert figures.within_60s_share == pytest.approx(1 / 3)
    assert figures.median_abs_error_s == 100.0  # of 50, 100 and the miss's infinity


def test_the_observer_estimates_every_job_that_waits_and_keeps_the_run_unchanged() -> None:
    jobs = workload.with_noise(
        workload.synthetic(
            workload.SyntheticSpec(jobs=40, arrival_rate_per_h=60.0, nodes=1, seed=4)
        ),
        workload.Noise(seed=4),
    )
    observed = estimates.Estimates(jobs)

    run = timed.run_time(jobs, "default", observer=observed)

    assert run.summary() | {"seconds": 0} == timed.run_time(jobs, "default").summary() | {
        "seconds": 0
    }
    waited = {m.workload for m in observed.made if m.at_submission}
    assert len(waited) == sum(delay > 0 for delay in run.delays_s) > 0
    assert any(not m.at_submission for m in observed.made)
    assert all(m.at % observed.every_s == 0 for m in observed.made if not m.at_submission)


def test_the_engine_expects_arrivals_only_from_what_was_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The outlook is made of submissions already seen (never the workload's future jobs);
    without one the engine expects nothing."""
    jobs = workload.with_noise(
        workload.synthetic(
            workload.SyntheticSpec(jobs=40, arrival_rate_per_h=60.0, nodes=1, seed=4)
        ),
        workload.Noise(seed=4),
    )
    arrival_of = {j.request.id: j.request.submitted_at for j in jobs.jobs}
    asked: list[tuple[float, list[Request]]] = []

    def expecting(
        submitted: Iterable[Request], now: float, *args: Any, **kwargs: Any
    ) -> list[Request]:
        seen = list(submitted)
        asked.append((now, seen))
        return expected_arrivals(seen, now, *args, **kwargs)

    monkeypatch.setattr(estimates, "expected_arrivals", expecting)
    observed = estimates.Estimates(jobs, outlook=Outlook(window_s=1800, min_window_s=60))
    timed.run_time(jobs, "default", observer=observed)

    assert any(submitted for _, submitted in asked)
    for now, submitted in asked:
        assert all(r.submitted_at <= now and arrival_of[r.id] <= now for r in submitted)
    asked.clear()
    timed.run_time(jobs, "default", observer=estimates.Estimates(jobs, outlook=None))
    assert asked == []


def test_the_bounds_tell_the_engine_what_no_estimator_knows_and_it_comes_near_the_truth() -> None:
    """Told the real future submissions and runtimes, the forecast is the run itself but for
    what it leaves out (fair share moving, preempted work run again, grouped instants):
    most estimates within; each unknown alone keeps it far from that."""
    jobs = workload.with_noise(
        workload.synthetic(
            workload.SyntheticSpec(jobs=40, arrival_rate_per_h=60.0, nodes=1, seed=4)
        ),
        workload.Noise(seed=4),
    )
    within = {}
    for knows in ((), ("arrivals",), ("runtimes",), ("arrivals", "runtimes")):
        observed = estimates.Estimates(
            jobs, knows_arrivals="arrivals" in knows, knows_runtimes="runtimes" in knows
        )
        timed.run_time(jobs, "default", observer=observed)
        within[knows] = observed.figures(at_submission=True)["engine"].within_share

    both = within[("arrivals", "runtimes")]
    assert both >= 0.5
    assert both > max(within[("arrivals",)], within[("runtimes",)], within[()])


def test_the_command_prints_the_estimate_figures_last() -> None:
    out = io.StringIO()

    call_command(
        "simulate",
        "--mode=time",
        "--estimates",
        "--policies=default",
        "--num-jobs=40",
        "--rate=60",
        "--cluster-nodes=1",
        "--json",
        stdout=out,
    )

    payload = json.loads(out.getvalue().strip().splitlines()[-1])
    keys = {"within_share", "within_60s_share", "median_abs_error_s"}
    assert keys <= set(payload["estimates"])
    assert keys <= set(payload["baselines"]["depth_rate"])
    assert keys <= set(payload["baselines"]["backfill_plan"])
    assert payload["estimates"]["count"] > 0
    assert payload["noise"]["factor_median"] == 2.0
    assert payload["estimates"]["arrivals"]["window_s"] > 0
    assert payload["estimates"]["knows"] == []  # no bound asked for: a real estimator


def test_estimates_need_the_engines_run() -> None:
    with pytest.raises(CommandError, match="include default"):
        call_command("simulate", "--mode=time", "--estimates", "--policies=first-fit")
