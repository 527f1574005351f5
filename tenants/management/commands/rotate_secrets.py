"""``manage.py rotate_secrets``: seal every project secret again with the first key of
``SECRETS_KEYS``. Run it after putting a new key first; then the old key can be dropped."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from tenants import services


class Command(BaseCommand):
    help = "Re-encrypt every project secret with the first of SECRETS_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        count = services.secrets_reseal()
        self.stdout.write(f"resealed {count} secrets with the first key")
