"""Usage: GPU-hours per day by project and model, as charts, the table behind them, CSV."""

from __future__ import annotations

import csv

from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.utils import timezone

from console.forms.usage import MonthForm
from console.guard import ConsoleRequest, signed_in
from console.selectors import usage as selectors
from neocloud.core.spreadsheets import csv_cell

CSV_COLUMNS = ["day", "project", "gpu_model", "gpu_hours", "gpu_seconds"]


def _month_usage(request: ConsoleRequest) -> tuple[MonthForm, selectors.MonthUsage]:
    if "usage" not in request.console.areas:
        raise PermissionDenied
    now = timezone.now()
    form = MonthForm(request.GET)
    return form, selectors.month_usage(request.console, form.chosen(now.date()), now)


@signed_in
def usage(request: ConsoleRequest) -> HttpResponse:
    form, month = _month_usage(request)
    status = 400 if form.errors else 200
    context = {"form": form, "usage": month, "csv_query": f"month={month.month:%Y-%m}"}
    return render(request, "console/usage/usage.html", context, status=status)


@signed_in
def usage_csv(request: ConsoleRequest) -> HttpResponse:
    """The page's table, row for row."""
    form, month = _month_usage(request)
    if form.errors:
        return HttpResponse("month: expected YYYY-MM\n", status=400, content_type="text/plain")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{month.month:%Y-%m}.csv"'
    writer = csv.writer(response, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in month.rows:
        writer.writerow([csv_cell(getattr(row, column)) for column in CSV_COLUMNS])
    return response


urlpatterns: list[URLPattern] = [
    path("usage", usage, name="usage"),
    path("usage.csv", usage_csv, name="usage-csv"),
]
