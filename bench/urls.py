"""Bench-only URL map (``bench.settings``): the project's URLs plus the baseline of
``manage.py bench api``, a minimal Django view served by the same gunicorn."""

import os

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, path

from neocloud.urls import urlpatterns as project_urlpatterns

# Names the gunicorn worker that answered, so the benchmark's clients can spread their
# keep-alive connections evenly over the workers.
WORKER_HEADER = "X-Bench-Worker"


def baseline(request: HttpRequest) -> JsonResponse:
    """The floor every API request pays: Django's middleware, routing and a JSON body."""
    response = JsonResponse({"ok": True})
    response[WORKER_HEADER] = str(os.getpid())
    return response


urlpatterns: list[URLPattern | URLResolver] = [
    *project_urlpatterns,
    path("bench/baseline", baseline, name="bench-baseline"),
]
