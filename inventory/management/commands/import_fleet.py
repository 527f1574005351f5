"""``manage.py import_fleet FILE.yaml`` or ``manage.py import_fleet --alibaba-nodes CSV``:
operators describe the fleet (format: ``inventory.fleet_import.fleet_file``, example:
``examples/fleet.yaml``). Running it again changes only what the file changed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory import fleet_import
from inventory.fleet_import import FleetSpec, ImportSummary
from neocloud.core.errors import ApplicationError
from tenants.access import Actor


class Command(BaseCommand):
    help = (
        "Import GPU models, regions, clusters, racks and nodes from a fleet YAML file, or the"
        " nodes of the Alibaba GPU trace (openb_node_list_*.csv). Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?", metavar="FILE.yaml")
        parser.add_argument(
            "--alibaba-nodes",
            metavar="CSV",
            help="import the node list of the Alibaba GPU trace v2023 instead of a YAML file",
        )
        parser.add_argument(
            "--rack-size",
            type=int,
            default=fleet_import.ALIBABA_RACK_SIZE,
            help="with --alibaba-nodes: nodes of one model per rack (default %(default)s)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="check and apply, then roll back: show what the import would change",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        try:
            source, fleet = self._parse(options)
            summary = fleet_import.fleet_import(
                actor=Actor.system_actor("import_fleet"), fleet=fleet, dry_run=options["dry_run"]
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self._report(source, summary, time.perf_counter() - started)

    def _parse(self, options: dict[str, Any]) -> tuple[str, FleetSpec]:
        path, csv_path = options["file"], options["alibaba_nodes"]
        if bool(path) == bool(csv_path):
            raise CommandError("give either FILE.yaml or --alibaba-nodes CSV")
        if options["rack_size"] < 1:
            raise CommandError("--rack-size must be at least 1")
        source = csv_path or path
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {source}: {exc}") from exc
        if csv_path:
            return source, fleet_import.alibaba_nodes_parse(text, rack_size=options["rack_size"])
        return source, fleet_import.fleet_parse_yaml(text)

    def _report(self, source: str, summary: ImportSummary, seconds: float) -> None:
        verb = "Would import" if summary.dry_run else "Imported"
        self.stdout.write(f"{verb} {source} in {seconds:.1f} s ({summary.events} events)")
        self.stdout.write(f"{'':<12}{'total':>8}{'new':>8}{'changed':>9}{'unchanged':>11}")
        for label, tally in summary.rows():
            self.stdout.write(
                f"{label:<12}{tally.total:>8}{tally.new:>8}{tally.changed:>9}{tally.unchanged:>11}"
            )
        if summary.dry_run:
            self.stdout.write("Dry run: nothing was written.")
        elif summary.nodes.new:
            self.stdout.write(
                "Node agent tokens are not shown by a bulk import: rotate a node's token to"
                " get one."
            )
