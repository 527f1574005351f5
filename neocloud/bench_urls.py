"""Bench-only URL map (``neocloud.bench_settings``): the project's URLs plus the baseline of
``manage.py bench api``, a minimal Django view served by the same gunicorn."""

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, path

from neocloud.urls import urlpatterns as project_urlpatterns


def baseline(request: HttpRequest) -> JsonResponse:
    """The floor every API request pays: Django's middleware, routing and a JSON body."""
    return JsonResponse({"ok": True})


urlpatterns: list[URLPattern | URLResolver] = [
    *project_urlpatterns,
    path("bench/baseline", baseline, name="bench-baseline"),
]
