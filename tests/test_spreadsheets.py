"""CSV cells a spreadsheet would evaluate are written as text (OWASP's CSV-injection rule), in
every CSV the project writes: the console's usage download and the API's usage report."""

from __future__ import annotations

import csv
import io

import pytest

from metering.api import UsageCsvRenderer
from neocloud.core.spreadsheets import csv_cell

pytestmark = pytest.mark.smoke


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        pytest.param('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")', id="equals"),
        pytest.param("+1+1", "'+1+1", id="plus"),
        pytest.param("-1+1", "'-1+1", id="minus"),
        pytest.param("@SUM(A1)", "'@SUM(A1)", id="at"),
        pytest.param("\t=1", "'\t=1", id="tab"),
        pytest.param("\r=1", "'\r=1", id="carriage-return"),
        pytest.param("Training", "Training", id="plain-text"),
        pytest.param("a=b", "a=b", id="formula-sign-inside"),
        pytest.param("", "", id="empty"),
        pytest.param(-3, -3, id="a-number-stays-a-number"),
    ],
)
def test_text_a_spreadsheet_would_evaluate_starts_with_a_quote(value: object, cell: object) -> None:
    assert csv_cell(value) == cell


def test_the_apis_usage_csv_writes_its_cells_as_text() -> None:
    row = {"offering": "=1+1", "gpu_seconds": "1.000", "milli_gpu_seconds": 1000}
    report = {"group_by": ["offering"], "results": [row]}

    rendered = UsageCsvRenderer().render(report).decode()

    assert list(csv.reader(io.StringIO(rendered))) == [
        ["offering", "gpu_seconds", "milli_gpu_seconds"],
        ["'=1+1", "1.000", "1000"],
    ]
