"""``manage.py bench api`` runs end to end and prints its figures. Benchmarks measure; this
test only checks that every figure is there and that no request failed, never a timing."""

from __future__ import annotations

import pytest

from tests.bench import bench_json

WORKLOADS = ("baseline", "baseline_auth", "list", "create", "workloads_list", "workloads_create")


@pytest.mark.postgres
def test_the_api_benchmark_prints_its_figures_as_json() -> None:
    figures = bench_json("api", scale=0.05)

    assert figures["suite"] == "api"
    assert figures["unit"] == "requests/s"
    assert set(figures["ratios"]) == {
        "list_vs_baseline",
        "create_vs_baseline",
        "list_vs_baseline_auth",
        "create_vs_baseline_auth",
        "workloads_list_vs_baseline_auth",
        "workloads_create_vs_baseline_auth",
    }
    assert all(ratio > 0 for ratio in figures["ratios"].values())
    goals = figures["goals"]
    assert (goals["list_vs_baseline_auth"], goals["create_vs_baseline_auth"]) == (0.5, 0.3)
    assert isinstance(goals["met"], bool)
    measured = figures["figures"]
    assert measured["errors"] == dict.fromkeys(WORKLOADS, 0)
    for workload in WORKLOADS:
        assert measured[f"{workload}_rps"] > 0
        assert measured[f"{workload}_p50_ms"] <= measured[f"{workload}_p95_ms"]
    for key in ("list_rps", "create_rps", "list_p95_ms", "create_p95_ms"):
        assert figures[key] == measured[key]
    assert measured["clients"] == 16
    assert measured["server"].startswith("gunicorn")
    assert figures["peak_rss_mb"] > 0
    assert figures["server_peak_rss_mb"] > 0
    assert figures["machine"]["cpus"] >= 1
