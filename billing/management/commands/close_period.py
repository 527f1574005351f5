"""``manage.py close_period YYYY-MM``: finalize every organization's invoices of a month."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import services
from neocloud.core.errors import ApplicationError


class Command(BaseCommand):
    help = "Invoice a month (UTC) for every organization; running it again changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("period", help="YYYY-MM")
        parser.add_argument(
            "--draft", action="store_true", help="Draft (or redraft) without finalizing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            period = services.Period.parse(options["period"])
            report = services.period_close(
                actor=services.SYSTEM, period=period, finalize=not options["draft"]
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        for invoice in report.invoices:
            self.stdout.write(
                f"{invoice.number} {invoice.status} {invoice.total_minor} {invoice.currency}"
            )
        for slug, reason in report.refused.items():
            self.stderr.write(f"not invoiced: {slug}: {reason}")
        if report.refused:
            raise CommandError(f"{len(report.refused)} organization(s) not invoiced")
