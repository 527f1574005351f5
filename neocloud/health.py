"""``/healthz`` and ``/readyz`` for load balancers and orchestrators (docs/operations/monitoring.md,
"Health checks"). Neither authenticates: they say only which checks pass and, in a few words,
what failed (a consumer's name, a count), never data or an error's text, which the log gets."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

import neocloud
from events.runner import projection_consumers
from events.selectors import consumer_lag
from scheduler.selectors import cluster_leases

logger = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return (
            {"ok": True} if self.ok and not self.reason else {"ok": self.ok, "reason": self.reason}
        )


def check_database() -> Check:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return Check(ok=True)


def check_redis() -> Check:
    if not settings.REDIS_URL:
        return Check(ok=True, reason="skipped: no REDIS_URL (tasks run in process)")
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )
    try:
        client.ping()
    except redis.RedisError:
        logger.warning("readiness: redis unreachable", exc_info=True)
        return Check(ok=False, reason="unreachable")
    finally:
        client.close()
    return Check(ok=True)


def check_migrations() -> Check:
    executor = MigrationExecutor(connection)
    unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if unapplied:
        return Check(ok=False, reason=f"{len(unapplied)} not applied")
    return Check(ok=True)


def check_consumers() -> Check:
    """Each consumer's oldest unhandled event is younger than ``READY_MAX_CONSUMER_LAG_S``."""
    now = timezone.now()
    limit = settings.READY_MAX_CONSUMER_LAG_S
    lags = [consumer_lag(consumer, now=now) for consumer in projection_consumers()]
    behind = [lag for lag in lags if lag.seconds > limit]
    if behind:
        names = ", ".join(f"{lag.name} ({lag.seconds:.0f} s)" for lag in behind)
        return Check(ok=False, reason=f"behind more than {limit:g} s: {names}")
    return Check(ok=True)


def check_scheduler_leases() -> Check:
    """Every cluster has a scheduler: its lease is held and not expired."""
    leases = cluster_leases(now=timezone.now())
    unheld = [lease for lease in leases if lease.holder is None]
    if unheld:
        logger.warning(
            "readiness: clusters without a scheduler",
            extra={"clusters": [lease.cluster_slug for lease in unheld]},
        )
        return Check(ok=False, reason=f"{len(unheld)} of {len(leases)} clusters not held")
    return Check(ok=True)


READINESS: dict[str, Callable[[], Check]] = {
    "database": check_database,
    "redis": check_redis,
    "migrations": check_migrations,
    "consumers": check_consumers,
    "scheduler_leases": check_scheduler_leases,
}


def _run(name: str, check: Callable[[], Check]) -> Check:
    try:
        return check()
    except DatabaseError:
        logger.warning("readiness: %s failed on the database", name, exc_info=True)
        return Check(ok=False, reason="database unreachable")


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and answering: no database, no broker. The version tells a rolling
    upgrade's instances apart."""
    return JsonResponse({"status": "ok", "version": neocloud.__version__})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Whether this instance should get traffic: 200 when every check passes, else 503."""
    checks = {name: _run(name, check) for name, check in READINESS.items()}
    ready = all(check.ok for check in checks.values())
    body = {
        "status": "ready" if ready else "unready",
        "checks": {name: check.as_dict() for name, check in checks.items()},
    }
    return JsonResponse(body, status=200 if ready else 503)
