"""NeoCloud project package: settings, URLs, the Celery app and the API conventions."""

from importlib.metadata import version

from neocloud.celery import app as celery_app

# pyproject's version, the one source: the API root, /healthz and the agent report it.
__version__ = version("neocloud")

__all__ = ["__version__", "celery_app"]
