"""``manage.py create_organization NAME --owner EMAIL [--project SLUG]``: operators bootstrap a
customer, with a first project (``default`` unless named) so work can be submitted at once."""

from __future__ import annotations

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants import services
from tenants.access import Actor

SLUG = re.compile(r"[-a-zA-Z0-9_]{1,64}")


class Command(BaseCommand):
    help = (
        "Create an organization with its owner and a first project, and print the owner's"
        " first API key once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--owner", required=True, metavar="EMAIL")
        parser.add_argument("--slug", default="")
        parser.add_argument("--billing-email", default="")
        parser.add_argument(
            "--project",
            default="default",
            metavar="SLUG",
            help="the first project's slug and name (default %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not SLUG.fullmatch(options["project"]):
            raise CommandError(f"--project {options['project']!r}: a slug (letters, digits, -, _)")
        try:
            organization, project, owner, secret = atomic_with_retry(
                services.organization_bootstrap,
                actor=Actor.system_actor("create_organization"),
                name=options["name"],
                owner_email=options["owner"],
                slug=options["slug"],
                billing_email=options["billing_email"],
                project_slug=options["project"],
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message} {exc.fields or ''}".strip()) from exc
        self.stdout.write(f"organization {organization.slug} ({organization.pk})")
        self.stdout.write(f"project      {project.slug} ({project.pk})")
        self.stdout.write(f"owner        {owner.email}")
        self.stdout.write(f"API key      {secret}")
        self.stdout.write("The key is shown once: store it now.")
