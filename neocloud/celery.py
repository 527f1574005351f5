"""The Celery application.

With ``REDIS_URL`` set, tasks go through Redis to separate ``celery -A neocloud worker`` and
``celery -A neocloud beat`` processes. Without it (the embedded default) tasks run eagerly in
the calling process, so the one-command demo needs no broker.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neocloud.settings")

app = Celery("neocloud")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
