"""``manage.py provision_fleet [--cluster SLUG] [--wait SECONDS]``: provision every registered
node (after ``import_fleet``), as ``POST /api/v1/nodes/{id}/provision`` does: each run starts
in the node's stream and its steps go to the Celery workers once it commits (in process on
the embedded default). ``--failed`` provisions failed nodes again too."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory import services
from inventory.lifecycle import NodeState
from inventory.models import Node
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor

POLL_S = 1.0


class Command(BaseCommand):
    help = "Provision the registered nodes of the fleet (or of one cluster) through the workers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", metavar="SLUG", help="only this cluster's nodes")
        parser.add_argument(
            "--failed", action="store_true", help="provision failed nodes again as well"
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="wait up to this long for the nodes to be ready; exit 1 if some are not",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        states = [NodeState.REGISTERED] + ([NodeState.FAILED] if options["failed"] else [])
        nodes = Node.objects.filter(state__in=states).order_by("name")
        if options["cluster"]:
            nodes = nodes.filter(cluster__slug=options["cluster"])
        chosen = list(nodes)
        actor = Actor.system_actor("provision_fleet")
        for node in chosen:
            try:
                atomic_with_retry(services.node_provision, actor=actor, node=node)
            except ApplicationError as exc:
                raise CommandError(f"{node.name}: {exc.code}: {exc.message}") from exc
        self.stdout.write(f"provisioning {len(chosen)} nodes")
        if options["wait"] > 0 and chosen:
            self._wait([node.pk for node in chosen], options["wait"])

    def _wait(self, node_ids: list[Any], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            states = dict(Node.objects.filter(pk__in=node_ids).values_list("name", "state"))
            waiting = sorted(n for n, s in states.items() if s == NodeState.PROVISIONING)
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        ready = sum(1 for s in states.values() if s == NodeState.READY)
        self.stdout.write(f"{ready} of {len(states)} nodes ready")
        not_ready = sorted(n for n, s in states.items() if s != NodeState.READY)
        if not_ready:
            raise CommandError(f"not ready: {', '.join(not_ready)}")
