"""``manage.py bench longpoll`` at a small scale: the ASGI server, follows and agents' polls
open while heartbeats are measured. Its JSON names every figure; no timing is asserted (a
benchmark measures)."""

from __future__ import annotations

import pytest

from tests.bench import bench_json


@pytest.mark.postgres
def test_the_longpoll_benchmark_measures_heartbeats_beside_open_long_polls() -> None:
    figures = bench_json("longpoll", scale=0.02)

    assert figures["suite"] == "longpoll"
    assert (figures["follows"], figures["agents"]) == (20, 4)
    loaded = ("loaded_whole_run", "loaded_steady")
    for phase in ("idle", *loaded):
        latency = figures["heartbeat_ms"][phase]
        assert 0 < latency["p50"] <= latency["p99"], phase
    assert set(figures["goal_met"]) == set(loaded)
    measured = figures["heartbeats_measured"]
    assert 0 < measured["loaded_steady"] < measured["loaded_whole_run"]
    assert figures["errors"] == 0
    # The waiters hold no session each, nor a thread each: the server reads on a few of its own.
    waiters = figures["follows"] + figures["agents"]
    assert 0 < figures["db_sessions_peak"] < waiters
    assert 0 < figures["server_threads_peak"] < waiters
    assert set(figures["ratios"]) == {
        f"heartbeat_{p}_{phase}_vs_idle" for phase in loaded for p in ("p50", "p99")
    }
    for key in ("peak_rss_mb", "server_peak_rss_mb", "loaded_s", "server_cpu_s", "requests_sent"):
        assert figures[key] > 0, key
