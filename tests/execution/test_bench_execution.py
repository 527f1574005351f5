"""``manage.py bench execution`` end to end at a small scale: gunicorn, real agents with fake
GPUs, the runs themselves. Its JSON names every figure, every job ran and the run's whole
output was stored; no timing is asserted (a benchmark measures)."""

from __future__ import annotations

import pytest

from tests.bench import bench_json

PHASES = ("long_poll", "short_poll")


@pytest.mark.postgres
def test_the_execution_benchmark_runs_jobs_through_agents_and_prints_its_figures() -> None:
    figures = bench_json("execution", scale=0.05)

    assert figures["suite"] == "execution"
    for phase in PHASES:
        measured = figures[phase]
        assert measured["succeeded"] == measured["jobs"] == 4, phase
        for latency in ("dispatch_ms", "submit_to_succeeded_ms"):
            assert 0 < measured[latency]["p50"] <= measured[latency]["p99"], (phase, latency)
        assert measured["server_cpu_s"] > 0, phase
        assert measured["agent_peak_rss_mb"] > 0, phase
    assert figures["dispatch_ms_p50"] == figures["long_poll"]["dispatch_ms"]["p50"]
    logs = figures["log_ingest"]
    assert logs["status"] == "succeeded"
    assert logs["bytes_stored"] == logs["bytes_written"] == figures["log_direct"]["bytes_stored"]
    assert logs["truncated_bytes"] == logs["dropped_bytes"] == 0
    assert figures["log_ingest_mib_s"] > 0
    assert set(figures["ratios"]) == {
        "dispatch_p50_long_vs_short",
        "dispatch_p99_long_vs_short",
        "server_cpu_long_vs_short",
        "log_ingest_vs_direct",
    }
    assert all(ratio > 0 for ratio in figures["ratios"].values())
    for key in ("peak_rss_mb", "agent_peak_rss_mb", "server_peak_rss_mb"):
        assert figures[key] > 0, key
