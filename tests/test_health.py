"""``/healthz`` and ``/readyz``: each readiness check turns the answer to 503 naming itself
and what failed, and back to 200 once the cause is gone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.utils import timezone

import neocloud
from events import store
from events.consumers import consumer_catch_up
from events.runner import projection_consumers
from inventory import services as inventory
from scheduler.models import SchedulerLease
from scheduler.scheduling import lease_acquire
from tests.builders import run
from tests.ledger.events import AccountOpened, Deposited

pytestmark = [pytest.mark.smoke, pytest.mark.django_db]

DEAD_REDIS = "redis://127.0.0.1:9/0"  # the discard port: nothing answers there


def ready(client: Client) -> tuple[int, dict[str, Any]]:
    response = client.get("/readyz")
    assert response["Content-Type"] == "application/json"
    return response.status_code, response.json()


def failed(body: dict[str, Any]) -> dict[str, str]:
    return {name: c["reason"] for name, c in body["checks"].items() if not c["ok"]}


def test_healthz_answers_without_touching_the_database(
    client: Client, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0):
        response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": neocloud.__version__}


def test_readyz_is_ready_when_every_check_passes(client: Client) -> None:
    status, body = ready(client)

    assert status == 200
    assert body["status"] == "ready"
    assert set(body["checks"]) == {
        "database",
        "redis",
        "migrations",
        "consumers",
        "scheduler_leases",
    }
    assert failed(body) == {}


def test_readyz_turns_unready_while_redis_is_unreachable(client: Client, settings: Any) -> None:
    working = settings.REDIS_URL
    settings.REDIS_URL = DEAD_REDIS

    status, body = ready(client)

    assert status == 503
    assert body["status"] == "unready"
    assert failed(body) == {"redis": "unreachable"}

    settings.REDIS_URL = working
    assert ready(client)[0] == 200


def test_redis_is_skipped_on_the_embedded_default(client: Client, settings: Any) -> None:
    settings.REDIS_URL = ""

    status, body = ready(client)

    assert status == 200
    assert body["checks"]["redis"] == {
        "ok": True,
        "reason": "skipped: no REDIS_URL (tasks run in process)",
    }


def test_readyz_turns_unready_while_a_consumer_is_behind_and_ready_after_it_catches_up(
    client: Client, settings: Any
) -> None:
    settings.READY_MAX_CONSUMER_LAG_S = 0.0
    store.append(
        "account",
        "a1",
        [AccountOpened(owner="ada"), Deposited(amount_cents=5, memo="")],
        expected_version=0,
    )

    status, body = ready(client)

    assert status == 503
    assert list(failed(body)) == ["consumers"]
    assert "projection:ledger.owner_totals" in failed(body)["consumers"]

    for consumer in projection_consumers():
        consumer_catch_up(consumer)
    assert ready(client)[0] == 200


def test_a_consumer_under_the_threshold_is_ready(client: Client, settings: Any) -> None:
    settings.READY_MAX_CONSUMER_LAG_S = 3600.0
    store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)

    assert ready(client)[0] == 200


def test_readyz_turns_unready_while_a_migration_is_not_applied(client: Client) -> None:
    MigrationRecorder.Migration.objects.filter(app="events").latest("id").delete()

    status, body = ready(client)

    assert status == 503
    assert failed(body) == {"migrations": "1 not applied"}


def test_readyz_turns_unready_while_a_cluster_has_no_scheduler(client: Client) -> None:
    region = run(inventory.region_define, slug="eu", name="Europe")
    cluster = run(inventory.cluster_define, region=region, slug="fra1", name="fra1")

    status, body = ready(client)
    assert status == 503
    assert failed(body) == {"scheduler_leases": "1 of 1 clusters not held"}

    assert lease_acquire(cluster.id, "worker-1@host") is not None
    assert ready(client)[0] == 200

    SchedulerLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert failed(ready(client)[1]) == {"scheduler_leases": "1 of 1 clusters not held"}


def test_readyz_answers_json_for_a_broken_database_check(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    from neocloud import health

    def broken() -> health.Check:
        raise OperationalError("connection refused to db.internal:5432 as neocloud")

    monkeypatch.setitem(health.READINESS, "database", broken)

    status, body = ready(client)

    assert status == 503
    assert failed(body) == {"database": "database unreachable"}
    assert "db.internal" not in str(body)  # the error's text goes to the log only
