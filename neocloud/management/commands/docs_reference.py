"""``manage.py docs_reference``: write the reference pages generated from the code."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from neocloud.management.reference import DOCS, PAGES


class Command(BaseCommand):
    help = (
        "Write docs/reference's generated pages (error codes, events, commands, the OpenAPI"
        " schema) from the code; run it on PostgreSQL, whose schema the API's is."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help="Write nothing; fail if a committed page differs from what the code gives.",
        )

    def handle(self, *args: Any, check: bool, **options: Any) -> None:
        stale = []
        for name, write in PAGES.items():
            path = DOCS / name
            text = write()
            if path.exists() and path.read_text() == text:
                continue
            stale.append(name)
            if not check:
                path.write_text(text)
        if check and stale:
            raise CommandError(f"stale: {', '.join(stale)} (run manage.py docs_reference)")
        self.stdout.write(f"{'stale' if check else 'written'}: {', '.join(stale) or 'none'}")
