"""Cells of the CSV files the project writes, safe to open in a spreadsheet.

A spreadsheet reads a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage
return before one) as a formula, so a project named ``=HYPERLINK(...)`` would become a link in
its owner's usage report. OWASP's rule for CSV injection: such text starts with a ``'``, which
the spreadsheet shows as text. Numbers are written as they are: only text can carry a formula.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """``value`` as a CSV cell: text a spreadsheet would evaluate is quoted with a ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return f"'{value}"
    return value
