"""``manage.py events tail``: the log as JSON lines."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from events import store
from events.wakeup import Listener


class Command(BaseCommand):
    help = "Inspect the event log."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        tail = sub.add_parser("tail", help="Print events as JSON lines, in position order.")
        tail.add_argument("--from", dest="after", type=int, default=0, metavar="POS",
                          help="print events after this position (default: from the start)")
        tail.add_argument("--stream", metavar="TYPE[:ID]",
                          help="only this stream type, or one stream")
        tail.add_argument("--type", dest="types", action="append", metavar="EVENT_TYPE",
                          help="only these event types (repeatable)")
        tail.add_argument("--follow", "-f", action="store_true",
                          help="keep waiting for new events")
        tail.add_argument("--limit", type=int, default=0, help="stop after this many events")

    def handle(self, *args: Any, **options: Any) -> None:
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
