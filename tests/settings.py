"""Test settings: the project's, plus a small test-only app that exercises the event store."""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key")

from neocloud.settings import *  # noqa: F403
from neocloud.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.ledger"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast users in tests
