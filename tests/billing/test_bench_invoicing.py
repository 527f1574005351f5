"""``bench invoicing`` at a small scale: its JSON names the figures and the invoices it makes
add up to the SQL baseline's total (figures are measured, never asserted)."""

from __future__ import annotations

import pytest

from tests.bench import bench_json

pytestmark = pytest.mark.postgres


def test_the_invoicing_suite_invoices_every_organization() -> None:
    result = bench_json("invoicing", scale=0.01)

    figures = result["figures"]
    assert figures["invoices"] == figures["organizations"] == 10
    assert figures["refused"] == 0
    assert figures["totals_match"] is True
    assert figures["invoicing_s"] > 0
    assert result["ratios"]["invoicing_vs_sql_baseline"] > 0
