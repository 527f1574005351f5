"""Loading the settings where a process starts: ``manage.py``, the WSGI application, Celery."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def settings_load_or_exit(status: int = 1) -> None:
    """Load Django's settings, or end the process with ``status`` and the one line that
    names what is missing. A missing variable is the operator's to set, not a bug: its
    traceback (40 lines of Django and importlib) buried that line."""
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 - the first read loads the settings module
    except ImproperlyConfigured as error:
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        raise SystemExit(status) from None
