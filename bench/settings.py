"""Bench-only settings (``manage.py bench api`` serves gunicorn with them): the project's
settings with a URL map that adds the baseline view. Never used in production."""

from neocloud.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
