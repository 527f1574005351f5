"""``bench invoicing``: one month's invoices for 1,000 organizations (``invoicing_s``), beside
a single SQL aggregation of the same usage (``sql_baseline_s``) in the same run.

Each organization is made through the services (one project, 30 days of H100 usage). The
usage rows are written straight into metering's table: deriving them from the log is what
``bench metering`` measures; this suite measures rating, invoicing and its events. The
baseline sums the month's milli-GPU-seconds per organization in one ``GROUP BY`` and prices
each total once; ``totals_match`` says whether it arrives at the invoices' subtotals (it
should: one usage line per organization is rounded once either way).
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from bench.registry import peak_rss_mb, scratch_database, suite
from billing import services
from billing.models import DefaultGpuPrice, Invoice
from billing.rating import Price, amount_for
from metering.models import UsageSlice
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.services import organization_create, project_create, user_register

ORGANIZATIONS = 1000
DAYS = 30
PRICE = Price(250, "USD")  # per H100-hour, in cents
PERIOD = "2026-10"
ACTOR = Actor.system_actor("bench")


def _seed(organizations: int) -> None:
    owner = atomic_with_retry(user_register, actor=ACTOR, email="owner@bench.example")
    DefaultGpuPrice.objects.create(
        gpu_model="h100",
        price_plan="on_demand",
        price_per_gpu_hour_minor=PRICE.minor_per_gpu_hour,
        currency=PRICE.currency,
    )
    start = datetime(2026, 10, 1, tzinfo=UTC)
    rng = random.Random(7)  # noqa: S311 - sizes of fake usage, not a secret
    cluster = uuid.uuid4()
    rows = []
    for n in range(organizations):
        organization = atomic_with_retry(
            organization_create, actor=ACTOR, name=f"Org {n}", owner=owner, slug=f"org-{n}"
        )
        project = atomic_with_retry(
            project_create, actor=ACTOR, organization=organization, name="main"
        )
        for day in range(DAYS):
            begins = start + timedelta(days=day)
            seconds = rng.randint(60, 86_400)
            gpus = rng.choice([1, 2, 4, 8])
            rows.append(
                UsageSlice(
                    allocation_id=uuid.uuid4(),
                    workload_id=uuid.uuid4(),
                    organization_id=organization.pk,
                    project_id=project.pk,
                    cluster_id=cluster,
                    offering="",
                    price_plan="on_demand",
                    gpu_model="h100",
                    milli_gpus=gpus * 1000,
                    granted_at=begins,
                    day=begins.date(),
                    start_at=begins,
                    end_at=begins + timedelta(seconds=seconds),
                    milli_gpu_seconds=gpus * 1000 * seconds,
                )
            )
    UsageSlice.objects.bulk_create(rows, batch_size=5000)


def _sql_baseline(period: services.Period) -> tuple[float, int]:
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT organization_id, SUM(milli_gpu_seconds) FROM metering_usageslice"
            " WHERE start_at >= %s AND start_at < %s GROUP BY organization_id",
            [period.start, period.end],
        )
        totals = cursor.fetchall()
    subtotal = sum(amount_for(int(total), PRICE) for _, total in totals)
    return time.perf_counter() - began, subtotal


@suite("invoicing")
def invoicing(scale: float) -> dict[str, Any]:
    organizations = max(10, round(ORGANIZATIONS * scale))
    with scratch_database():
        _seed(organizations)
        period = services.Period.parse(PERIOD)
        baseline_s, baseline_subtotal = _sql_baseline(period)
        began = time.perf_counter()
        report = services.period_close(actor=services.SYSTEM, period=period, finalize=True)
        invoicing_s = time.perf_counter() - began
        invoices = Invoice.objects.filter(period=PERIOD)
        subtotal = sum(invoices.values_list("subtotal_minor", flat=True))
        finalized = invoices.filter(status__in=["finalized", "paid"]).count()
    return {
        "suite": "invoicing",
        "figures": {
            "organizations": organizations,
            "usage_rows": organizations * DAYS,
            "invoices": len(report.invoices),
            "finalized": finalized,
            "refused": len(report.refused),
            "invoicing_s": round(invoicing_s, 3),
            "invoices_per_s": round(len(report.invoices) / invoicing_s, 1),
            "sql_baseline_s": round(baseline_s, 4),
            "totals_match": subtotal == baseline_subtotal,
            "peak_rss_mb": peak_rss_mb(),
        },
        "ratios": {"invoicing_vs_sql_baseline": round(baseline_s / invoicing_s, 4)},
    }
