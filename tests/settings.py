"""Test settings: the project's, plus a small test-only app that exercises the event store.

On PostgreSQL the tests pay through a local Stripe: the localstripe (or stripe-mock) that
``scripts/with-services.sh`` started, else an address where nothing answers, never Stripe
itself. Set in the environment, so the processes tests start (workers, servers) get it too.
"""

import os

os.environ.setdefault("SECRET_KEY", "tests-only-secret-key")
os.environ.setdefault("SECRETS_KEYS", "bmVvY2xvdWQtdGVzdHMtb25seS1zZWNyZXRzLWtleSE=")
# The test servers (live_server, gunicorn) speak plain HTTP: cookies that a browser sends over
# it (a deployment's default is secure, tests/test_settings.py checks).
os.environ.setdefault("SESSION_COOKIE_SECURE", "false")
os.environ.setdefault("CSRF_COOKIE_SECURE", "false")
# The tests scrape /metrics from loopback, and read the tenant labels.
os.environ.setdefault("METRICS_ALLOWED_IPS", "127.0.0.1,::1")
os.environ.setdefault("METRICS_TENANT_LABELS", "true")
# The console's per-hour limits count in Redis across runs: the tests that show them set their
# own, from addresses of their own.
os.environ.setdefault("PASSWORD_RESETS_PER_HOUR", "100000")
os.environ.setdefault("PASSWORD_RESETS_PER_EMAIL_PER_HOUR", "100000")
os.environ.setdefault("SIGNUPS_PER_HOUR", "100000")
os.environ.setdefault("FORECASTS_PER_MINUTE_PER_ORGANIZATION", "100000")
if os.environ.get("DATABASE_URL"):
    os.environ.setdefault("STRIPE_API_KEY", "sk_test_neocloud")
    os.environ.setdefault("STRIPE_WEBHOOK_SECRET", "whsec_neocloud_tests")
    os.environ.setdefault(
        "STRIPE_API_BASE",
        os.environ.get("LOCALSTRIPE_URL")
        or os.environ.get("STRIPE_MOCK_URL")
        or "http://127.0.0.1:9",
    )

from neocloud.settings import *  # noqa: F403
from neocloud.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.ledger"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast users in tests
