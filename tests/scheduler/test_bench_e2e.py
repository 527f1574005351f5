"""``bench e2e`` end to end at a small scale: the API, a real worker, PostgreSQL and Redis; its
JSON names every figure, and the log it leaves is whole (figures are not asserted: a
benchmark measures)."""

from __future__ import annotations

import os

import pytest

from tests.bench import bench_json

pytestmark = pytest.mark.postgres


def test_the_e2e_suite_runs_workloads_through_the_api_on_a_worker() -> None:
    if not os.environ.get("REDIS_URL") or not os.environ.get("DATABASE_URL"):
        pytest.skip("bench e2e needs PostgreSQL and Redis (make test provides them)")
    figures = bench_json("e2e", scale=0.004)

    assert figures["workloads"] == 30 * 3  # one of each class per queue
    assert figures["submit_errors"] == 0
    assert figures["double_booked_gpus"] == 0
    assert figures["lost_workloads"] == 0
    for key in ("wall_s", "usage_pct", "scheduled_per_s", "engine_makespan_s"):
        assert figures[key] > 0, key
    assert set(figures["alloc_latency_ms"]) == {"small", "medium", "large"}
