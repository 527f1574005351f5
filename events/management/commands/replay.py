"""``manage.py replay``: rebuild every projection from position 0."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from events import projections
from events.replay import projections_replay


class Command(BaseCommand):
    help = "Empty the projection tables and apply the whole event log again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="only these projections (default: all)")

    def handle(self, *args: Any, **options: Any) -> None:
        names = options["names"] or None
        known = {p.name for p in projections.synchronous() + projections.asynchronous()}
        unknown = set(names or ()) - known
        if unknown:
            self.stderr.write(f"unknown projections: {', '.join(sorted(unknown))}")
            raise SystemExit(2)
        read = projections_replay(names=names)
        rebuilt = sorted(known if names is None else names)
        self.stdout.write(f"replayed {read} events into {', '.join(rebuilt)}")
