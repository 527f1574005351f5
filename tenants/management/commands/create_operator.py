"""``manage.py create_operator EMAIL``: an operator (a staff user) and a staff API key.

Operators act through the API with a key like everyone else; a key belongs to a member of an
organization, so the operator owns an organization of their own (``operators`` unless
``--organization`` names another), which holds their keys and nothing else. Running it again
for the same operator makes another key.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants import services
from tenants.access import Actor

PASSWORD_ENV = "NEOCLOUD_OPERATOR_PASSWORD"  # noqa: S105 - the variable's name, not a password


class Command(BaseCommand):
    help = (
        "Create an operator (staff user) with an organization of their own and print a staff"
        f" API key once. The admin password, if any, is read from ${PASSWORD_ENV}."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("--name", default="", help="the operator's full name")
        parser.add_argument(
            "--organization",
            default="operators",
            metavar="SLUG",
            help="the operators' own organization (default %(default)s), made if missing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user, organization, secret = atomic_with_retry(
                services.operator_bootstrap,
                actor=Actor.system_actor("create_operator"),
                email=options["email"],
                full_name=options["name"],
                password=os.environ.get(PASSWORD_ENV) or None,
                organization_slug=options["organization"],
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message} {exc.fields or ''}".strip()) from exc
        self.stdout.write(f"operator     {user.email} (staff)")
        self.stdout.write(f"organization {organization.slug} ({organization.pk})")
        self.stdout.write(f"API key      {secret}")
        self.stdout.write("The key is shown once: store it now.")
