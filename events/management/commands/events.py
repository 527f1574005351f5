"""``manage.py events tail``: the log as JSON lines; ``events consume``: run projections."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from events import store
from events.runner import consumers_start, projection_consumers
from events.wakeup import Listener


class Command(BaseCommand):
    help = "Inspect the event log."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        tail = sub.add_parser("tail", help="Print events as JSON lines, in position order.")
        tail.add_argument(
            "--from",
            dest="after",
            type=int,
            default=0,
            metavar="POS",
            help="print events after this position (default: from the start)",
        )
        tail.add_argument(
            "--stream", metavar="TYPE[:ID]", help="only this stream type, or one stream"
        )
        tail.add_argument(
            "--type",
            dest="types",
            action="append",
            metavar="EVENT_TYPE",
            help="only these event types (repeatable)",
        )
        tail.add_argument("--follow", "-f", action="store_true", help="keep waiting for new events")
        tail.add_argument("--limit", type=int, default=0, help="stop after this many events")
        consume = sub.add_parser(
            "consume", help="Run the asynchronous projections until interrupted."
        )
        consume.add_argument("names", nargs="*", help="only these projections")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "consume":
            self._consume(options["names"])
        else:
            self._tail(options)

    def _consume(self, names: list[str]) -> None:
        consumers = [
            c for c in projection_consumers() if not names or c.name.split(":", 1)[1] in names
        ]
        if not consumers:
            raise CommandError("no such asynchronous projection")
        stop = threading.Event()
        threads = consumers_start(consumers, stop)
        self.stdout.write(f"consuming: {', '.join(c.name for c in consumers)}")
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(1)
        except KeyboardInterrupt:
            stop.set()

    def _tail(self, options: dict[str, Any]) -> None:
        stream_type, _, stream_id = (options["stream"] or "").partition(":")
        printed = 0
        after = options["after"]
        limit = options["limit"]
        with Listener() as listener:
            while True:
                for batch in store.iter_batches(after=after, types=options["types"]):
                    for event in batch:
                        after = event.position
                        if stream_type and event.stream_type != stream_type:
                            continue
                        if stream_id and event.stream_id != stream_id:
                            continue
                        self.stdout.write(json.dumps(_as_json(event), sort_keys=True))
                        printed += 1
                        if limit and printed >= limit:
                            return
                if not options["follow"]:
                    return
                listener.wait(5.0)


def _as_json(event: store.RecordedEvent) -> dict[str, Any]:
    return {
        "position": event.position,
        "stream_type": event.stream_type,
        "stream_id": event.stream_id,
        "version": event.version,
        "type": event.type,
        "schema_version": event.schema_version,
        "data": event.data,
        "metadata": event.metadata,
        "recorded_at": event.recorded_at.isoformat(),
    }
