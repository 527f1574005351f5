"""The database-backed estimates benchmark: a line of waiting work in PostgreSQL, estimates
and dry runs with the inputs read per request and reused, figures of both (never timed)."""

from __future__ import annotations

import pytest

from tests.bench import bench_json

pytestmark = pytest.mark.postgres


def test_the_suite_reports_both_kinds_per_request_beside_their_baseline() -> None:
    figures = bench_json("estimates_api", scale=0.01)

    assert figures["figures"]["waiting"] == 200
    assert figures["figures"]["allocated"] > 0  # work ahead runs
    for kind in ("estimate", "dry_run"):
        measured = figures["figures"][kind]
        for key in ("baseline_cpu_s", "reused_cpu_s", "cpu_ratio", "baseline_wall_s"):
            assert measured[key] > 0, (kind, key)
        assert figures["ratios"][kind] == measured["cpu_ratio"]
    assert figures["peak_rss_mb"] > 0
