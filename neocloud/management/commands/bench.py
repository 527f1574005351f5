"""``manage.py bench SUITE [--json]``: run one benchmark suite."""

from __future__ import annotations

import json
from importlib import import_module
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import SUITE_MODULES
from bench.registry import suites


class Command(BaseCommand):
    help = "Run a benchmark suite; the last line printed is one JSON object of figures."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("suite", help="the suite to run (see --list)", nargs="?")
        parser.add_argument("--json", action="store_true", help="print only the JSON object")
        parser.add_argument(
            "--scale",
            type=float,
            default=1.0,
            help="multiply the documented sizes (e.g. 0.01 for a quick check)",
        )
        parser.add_argument("--list", action="store_true", help="list the suites")

    def handle(self, *args: Any, **options: Any) -> None:
        for module in SUITE_MODULES:
            import_module(f"bench.{module}")  # each registers its suite
        available = suites()
        if options["list"] or not options["suite"]:
            self.stdout.write("\n".join(sorted(available)))
            return
        try:
            run = available[options["suite"]]
        except KeyError:
            raise CommandError(
                f"unknown suite {options['suite']!r}; known: {', '.join(sorted(available))}"
            ) from None
        result = run(options["scale"])
        if not options["json"]:
            for key, value in result.items():
                self.stdout.write(f"{key}: {value}")
        self.stdout.write(json.dumps(result, sort_keys=True))
