"""ASGI entry point (``uvicorn neocloud.asgi:application``): long polls wait in coroutines,
holding no thread and no database connection (``execution.longpoll``); every other view runs
on a thread of its own, so none waits behind them. Bodies are bounded before Django reads
them (``neocloud.bodies.asgi_body_limit``)."""

import os

from django.core.asgi import get_asgi_application

from neocloud.core.startup import settings_load_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neocloud.settings")
# A sync request's connection is closed when it ends (see DATABASE_CONN_MAX_AGE).
os.environ["DATABASE_CONN_MAX_AGE"] = "0"
# 3: as gunicorn's status for a worker that cannot boot (neocloud/wsgi.py); uvicorn's
# supervisor gives up on a worker that exits at once too.
settings_load_or_exit(status=3)

django_application = get_asgi_application()

from neocloud.bodies import asgi_body_limit  # noqa: E402 (it needs the apps loaded)

application = asgi_body_limit(django_application)
