"""Bench-only URL map (``bench.settings``): the project's URLs plus the baselines of
``manage.py bench api``, served by the same gunicorn: a minimal Django view, and a minimal
API view that authenticates a key and makes one indexed query."""

import os

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, path
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from neocloud.urls import urlpatterns as project_urlpatterns
from tenants.models import ApiKey, Organization

# Names the gunicorn worker that answered, so the benchmark's clients can spread their
# keep-alive connections evenly over the workers.
WORKER_HEADER = "X-Bench-Worker"


def baseline(request: HttpRequest) -> JsonResponse:
    """The floor every API request pays: Django's middleware, routing and a JSON body."""
    response = JsonResponse({"ok": True})
    response[WORKER_HEADER] = str(os.getpid())
    return response


class BaselineAuth(APIView):
    """The floor of an authenticated API request: the API's authentication (the key's row,
    its hash, its use marked), permission and throttles, then one query by primary key."""

    def get(self, request: Request) -> Response:
        key = request.auth
        if not isinstance(key, ApiKey):  # signed in by session: the bench sends a key
            raise PermissionDenied("an API key is needed")
        slug = Organization.objects.filter(pk=key.organization_id).values("slug")
        return Response({"organization": slug.first()})


urlpatterns: list[URLPattern | URLResolver] = [
    *project_urlpatterns,
    path("bench/baseline", baseline, name="bench-baseline"),
    path("bench/baseline-auth", BaselineAuth.as_view(), name="bench-baseline-auth"),
]
