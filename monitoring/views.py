"""``/metrics``: every metric in Prometheus' text format, for a scraper that proves itself."""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from monitoring import instruments
from monitoring.collector import DatabaseCollector


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """With ``METRICS_TOKEN`` set, only ``Authorization: Bearer <it>`` (401 otherwise); with
    none, only the peers of ``METRICS_ALLOWED_IPS`` (403 otherwise; outside the embedded
    default there are none unless named)."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    token = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token):
            return None
        refused = HttpResponse(
            "a bearer token is required\n", status=401, content_type="text/plain"
        )
        refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refused
    if request.META.get("REMOTE_ADDR", "") in settings.METRICS_ALLOWED_IPS:
        return None
    return HttpResponse(
        "set METRICS_TOKEN (or name this peer in METRICS_ALLOWED_IPS)\n",
        status=403,
        content_type="text/plain",
    )


def _registry() -> CollectorRegistry:
    """A registry per scrape: this process's own values, or every process's of the host in
    multiprocess mode; and what the database says now."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = CollectorRegistry()
        registry.register(_Local())
    registry.register(DatabaseCollector())
    return registry


class _Local:
    """``instruments.LOCAL``'s metrics, added to a scrape's registry without re-registering
    them."""

    def collect(self):  # type: ignore[no-untyped-def]
        return instruments.LOCAL.collect()
