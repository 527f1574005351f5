"""``manage.py set_default_prices MODEL=MINOR … [--plan PLAN] [--currency USD]``: the price per
GPU-hour, in minor units, of usage that came from no offering (workloads submitted directly).
A fresh install has none, and ``close_period`` refuses to invoice such usage until it has."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import services
from billing.models import PLANS, DefaultGpuPrice
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor


class Command(BaseCommand):
    help = "Set default prices per GPU model (minor units per GPU-hour), all or none."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "prices", nargs="+", metavar="MODEL=MINOR", help="e.g. h100-sxm5-80gb=250 ($2.50)"
        )
        parser.add_argument("--plan", default="on_demand", choices=[p for p, _ in PLANS])
        parser.add_argument("--currency", default="USD")

    def handle(self, *args: Any, **options: Any) -> None:
        wanted: list[tuple[str, int]] = []
        for item in options["prices"]:
            model, _, minor = item.partition("=")
            if not model or not minor.isdigit():
                raise CommandError(f"{item!r}: expected MODEL=MINOR, e.g. h100-sxm5-80gb=250")
            wanted.append((model, int(minor)))
        try:
            prices = atomic_with_retry(
                _set_all,
                actor=Actor.system_actor("set_default_prices"),
                wanted=wanted,
                plan=options["plan"],
                currency=options["currency"],
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message} {exc.fields or ''}".strip()) from exc
        for price in prices:
            self.stdout.write(
                f"{price.gpu_model} {price.price_plan}: {price.price_per_gpu_hour_minor}"
                f" {price.currency} minor units per GPU-hour"
            )


def _set_all(
    *, actor: Actor, wanted: list[tuple[str, int]], plan: str, currency: str
) -> list[DefaultGpuPrice]:
    return [
        services.default_price_set(
            actor=actor,
            gpu_model=model,
            price_per_gpu_hour_minor=minor,
            currency=currency,
            price_plan=plan,
        )
        for model, minor in wanted
    ]
