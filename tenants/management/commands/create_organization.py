"""``manage.py create_organization NAME --owner EMAIL [--project SLUG] [--console-url URL]``:
operators bootstrap a customer, with a first project (``default`` unless named) so work can be
submitted at once, and a link where a new owner sets the password they do not have yet."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.tokens import default_token_generator
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

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
        parser.add_argument(
            "--console-url",
            default="",
            metavar="URL",
            help="the console's address, e.g. https://cloud.example.com, before the owner's"
            " set-password link (else the link is a path)",
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
        if not owner.has_usable_password():
            link = options["console_url"].rstrip("/") + _set_password_path(owner)
            self.stdout.write(f"set-password {link}")
            self.stdout.write(
                "Send the owner this link to set a password and sign in to the console (valid"
                " for PASSWORD_RESET_TIMEOUT; later, the console's 'Forgot password' works too)."
            )


def _set_password_path(user: Any) -> str:
    """The console's password-reset link for ``user``, as its e-mail would carry it."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return reverse("console:password-reset-confirm", kwargs={"uidb64": uid, "token": token})
