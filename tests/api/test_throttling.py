"""Throttles: 429 with ``Retry-After``, per API key and per IP for anonymous callers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache
from rest_framework.throttling import SimpleRateThrottle

from tests.builders import Builder, client_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def low_rates(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    cache.clear()
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"key": "3/min", "anon": "2/min"})
    yield
    cache.clear()


@pytest.mark.usefixtures("low_rates")
def test_a_key_over_its_rate_gets_429_with_retry_after(build: Builder) -> None:
    owner = build.user()
    org = build.organization(owner=owner)
    client = client_with_key(build.key(org, owner)[1])
    other = client_with_key(build.key(org, owner)[1])

    statuses = [client.get("/api/v1/me").status_code for _ in range(4)]
    throttled = client.get("/api/v1/me")

    assert statuses == [200, 200, 200, 429]
    assert throttled.json()["error"]["code"] == "throttled"
    assert int(throttled["Retry-After"]) > 0
    assert other.get("/api/v1/me").status_code == 200  # the limit is per key


@pytest.mark.usefixtures("low_rates")
def test_anonymous_callers_are_throttled_per_ip() -> None:
    client = client_with_key(None)

    statuses = [client.get("/api/v1/", REMOTE_ADDR="10.0.0.1").status_code for _ in range(3)]

    assert statuses == [200, 200, 429]
    assert client.get("/api/v1/", REMOTE_ADDR="10.0.0.2").status_code == 200
