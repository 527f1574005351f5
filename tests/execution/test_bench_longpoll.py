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
    for phase in ("idle", "loaded"):
        latency = figures["heartbeat_ms"][phase]
        assert 0 < latency["p50"] <= latency["p99"], phase
    assert figures["errors"] == 0
    # The waiters hold no session each: the server reads on a few threads of its own.
    assert 0 < figures["db_sessions_peak"] < figures["follows"] + figures["agents"]
    assert set(figures["ratios"]) == {
        "heartbeat_p50_loaded_vs_idle",
        "heartbeat_p99_loaded_vs_idle",
    }
    for key in ("peak_rss_mb", "server_peak_rss_mb", "server_threads_peak"):
        assert figures[key] > 0, key
