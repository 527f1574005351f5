"""NeoCloud project package: settings, URLs, the Celery app and the API conventions."""

from neocloud.celery import app as celery_app

__all__ = ["celery_app"]
