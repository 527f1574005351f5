"""``manage.py load_catalog FILE.yaml``: define offerings and their price plans from a file
(``examples/catalog.yaml`` is a starter catalog for ``examples/fleet.yaml``), through the
services the admin uses. All of the file or nothing; loading it again records nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog import services
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor

OFFERING_FIELDS = frozenset(services.DEFINITION_FIELDS)
PLAN_FIELDS = frozenset({"region", "plan", "price_per_gpu_hour_minor", "currency"})


class Place(CommandError):
    """A problem at a place of the file (``offerings[2].price_plans[0]``)."""


class Command(BaseCommand):
    help = "Define offerings and price plans from a catalog YAML file. Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE.yaml")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            data = yaml.safe_load(Path(options["file"]).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"{options['file']}: {exc}") from exc
        offerings = data.get("offerings") if isinstance(data, dict) else None
        if not isinstance(offerings, list):
            raise CommandError("the file needs a list of `offerings`")
        counts = atomic_with_retry(
            _load, actor=Actor.system_actor("load_catalog"), offerings=offerings
        )
        self.stdout.write(f"{counts[0]} offerings, {counts[1]} price plans")


def _load(*, actor: Actor, offerings: list[Any]) -> tuple[int, int]:
    plans = 0
    for i, entry in enumerate(offerings):
        place = f"offerings[{i}]"
        if not isinstance(entry, dict):
            raise Place(f"{place}: expected a mapping")
        fields = {k: v for k, v in entry.items() if k != "price_plans"}
        _check_keys(place, fields, OFFERING_FIELDS, required=frozenset({"slug", "name", "kind"}))
        try:
            offering = services.offering_define(actor=actor, **fields)
        except (ApplicationError, TypeError) as exc:
            raise Place(f"{place}: {_describe(exc)}") from exc
        for j, plan in enumerate(entry.get("price_plans") or []):
            plan_place = f"{place}.price_plans[{j}]"
            if not isinstance(plan, dict):
                raise Place(f"{plan_place}: expected a mapping")
            _check_keys(plan_place, plan, PLAN_FIELDS, required=PLAN_FIELDS)
            try:
                services.price_plan_set(actor=actor, offering=offering, **plan)
            except (ApplicationError, TypeError) as exc:
                raise Place(f"{plan_place}: {_describe(exc)}") from exc
            plans += 1
    return len(offerings), plans


def _check_keys(
    place: str,
    entry: dict[str, Any],
    allowed: frozenset[str],
    *,
    required: set[str] | frozenset[str],
) -> None:
    unknown = sorted(set(entry) - allowed)
    missing = sorted(set(required) - set(entry))
    if unknown:
        raise Place(f"{place}: unknown field {', '.join(unknown)}")
    if missing:
        raise Place(f"{place}: missing {', '.join(missing)}")


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApplicationError):
        return f"{exc.code}: {exc.message} {exc.fields or ''}".strip()
    return str(exc)
