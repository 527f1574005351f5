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

from neocloud.errors import ApplicationError
from neocloud.transactions import atomic_with_retry, row_lock
from tenants import services
from tenants.access import Actor
from tenants.models import Membership, Organization, Role, Scope, User

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
                _operator_with_key,
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


def _operator_with_key(
    *,
    actor: Actor,
    email: str,
    full_name: str,
    password: str | None,
    organization_slug: str,
) -> tuple[User, Organization, str]:
    # Its row before any append (the lock order of neocloud.transactions).
    organization = row_lock(Organization.objects.filter(slug=organization_slug)).first()
    user = User.objects.filter(email=email.lower()).first()
    if user is None:
        user = services.user_register(
            actor=actor, email=email, full_name=full_name, password=password, is_staff=True
        )
    elif not user.is_staff:
        user = services.user_update(
            actor=actor,
            user=user,
            full_name=full_name or user.full_name,
            is_staff=True,
            is_active=True,
        )
    if organization is None:
        organization = services.organization_create(
            actor=actor, name=organization_slug, owner=user, slug=organization_slug
        )
    elif not Membership.objects.filter(
        organization=organization, user=user, role=Role.OWNER
    ).exists():
        raise CommandError(
            f"organization {organization_slug!r} exists and {email} is not its owner;"
            " name another with --organization"
        )
    _, secret = services.api_key_create(
        actor=actor,
        organization=organization,
        user=user,
        name="operator key",
        scopes=list(Scope),
    )
    return user, organization, secret
