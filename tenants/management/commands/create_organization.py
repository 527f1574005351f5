"""``manage.py create_organization NAME --owner EMAIL``: operators bootstrap a customer."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from neocloud.errors import ApplicationError
from neocloud.transactions import atomic_with_retry
from tenants import services
from tenants.access import Actor
from tenants.models import Scope


class Command(BaseCommand):
    help = "Create an organization with its owner, and print the owner's first API key once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--owner", required=True, metavar="EMAIL")
        parser.add_argument("--slug", default="")
        parser.add_argument("--billing-email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = Actor.system_actor("create_organization")
        try:
            owner = atomic_with_retry(
                services.user_get_or_register, actor=actor, email=options["owner"]
            )
            organization = atomic_with_retry(
                services.organization_create,
                actor=actor,
                name=options["name"],
                owner=owner,
                slug=options["slug"],
                billing_email=options["billing_email"],
            )
            _, secret = atomic_with_retry(
                services.api_key_create,
                actor=actor,
                organization=organization,
                user=owner,
                name="first key",
                scopes=list(Scope),
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(f"organization {organization.slug} ({organization.pk})")
        self.stdout.write(f"owner        {owner.email}")
        self.stdout.write(f"API key      {secret}")
        self.stdout.write("The key is shown once: store it now.")
