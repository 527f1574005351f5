"""WSGI entry point (``gunicorn neocloud.wsgi``)."""

import os

from django.core.wsgi import get_wsgi_application

from neocloud.core.startup import settings_load_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neocloud.settings")
# 3: gunicorn's status for a worker that cannot boot, on which its master stops rather than
# starting another worker in its place, forever.
settings_load_or_exit(status=3)

application = get_wsgi_application()
