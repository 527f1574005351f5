"""``manage.py ssh_authorized_keys TYPE BASE64``: the jump host's ``AuthorizedKeysCommand``
(issue 32). The gateway's sshd runs it for each key a client offers (``%t %k``); it prints
the key with ``restrict,port-forwarding`` and one ``permitopen`` per sshd of the runs the key
may log in to, or nothing (the key is refused). It only reads."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from execution import selectors


class Command(BaseCommand):
    help = "Print the jump host's authorized_keys line for an offered SSH key (or nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key_type", help="the key's type, sshd's %%t")
        parser.add_argument("key_base64", help="the key, base64, sshd's %%k")

    def handle(self, *args: Any, **options: Any) -> None:
        line = selectors.ssh_jump_permits(
            key_type=options["key_type"], key_base64=options["key_base64"]
        )
        if line:
            self.stdout.write(line)
