"""The estimates benchmark suite: it forecasts every waiting workload and reports its cost
beside one cycle's."""

from __future__ import annotations

from bench.estimates import bench_estimates


def test_the_suite_forecasts_every_waiting_workload_and_reports_its_cost() -> None:
    figures = bench_estimates(0.02)

    assert figures["waiting"] > 0
    assert figures["estimated"] + figures["never_or_beyond_horizon"] == figures["waiting"]
    assert figures["estimated"] > 0
    assert 0 < figures["expected_arrivals"] <= 200  # the outlook's cap
    for key in ("estimate_ms", "baseline_cycle_ms", "cycles_per_estimate", "round_ms"):
        assert figures[key] > 0, key
    assert figures["peak_rss_mb"] > 0
    assert figures["full_collections_per_round"] >= 0
