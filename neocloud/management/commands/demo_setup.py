"""``manage.py demo_setup``: the demo's data on the embedded default.

For now an operator account for the admin; later issues add the fleet and a tenant.
Idempotent, and refused outside the embedded default so production never gets these logins.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

DEMO_OPERATOR = ("admin", "admin@neocloud.local", "admin")


class Command(BaseCommand):
    help = "Create the demo's data (embedded default only)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.EMBEDDED:
            raise CommandError("demo_setup runs only on the embedded default (no DATABASE_URL)")
        username, email, password = DEMO_OPERATOR
        users = get_user_model()
        if not users.objects.filter(username=username).exists():
            users.objects.create_superuser(username, email, password)
        self.stdout.write(f"operator login for /admin/: {username} / {password}")
