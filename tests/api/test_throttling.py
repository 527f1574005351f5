"""Throttles: 429 with ``Retry-After``, per API key and per IP for anonymous callers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import RequestFactory
from pytest_django.fixtures import Settings
from rest_framework.throttling import SimpleRateThrottle

from neocloud.core.addresses import client_address
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


@pytest.mark.usefixtures("low_rates")
def test_a_forwarded_for_header_makes_no_new_caller_without_trusted_proxies() -> None:
    client = client_with_key(None)

    statuses = [
        client.get(
            "/api/v1/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}"
        ).status_code
        for n in range(3)
    ]

    assert statuses == [200, 200, 429]


@pytest.mark.usefixtures("low_rates")
def test_behind_a_trusted_proxy_callers_are_told_apart_by_what_it_appended(
    settings: Settings,
) -> None:
    settings.TRUSTED_PROXY_COUNT = 1
    client = client_with_key(None)

    def call(forwarded: str) -> int:
        response = client.get("/api/v1/", REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)
        return response.status_code

    # The caller wrote the left entries itself; the proxy appended the last one.
    spoofing = [call(f"198.51.100.{n}, 203.0.113.5") for n in range(3)]

    assert spoofing == [200, 200, 429]
    assert call("203.0.113.6") == 200  # another caller behind the same proxy


@pytest.mark.parametrize(
    ("count", "forwarded", "expected"),
    [
        (0, "203.0.113.5", "10.9.9.9"),  # no proxy trusted: the header is the caller's own
        (1, "198.51.100.1, 203.0.113.5", "203.0.113.5"),
        (2, "198.51.100.1, 203.0.113.5, 10.0.0.2", "203.0.113.5"),
        (2, "203.0.113.5", "203.0.113.5"),  # fewer entries than proxies: the farthest
        (1, "", "10.9.9.9"),
        (1, "not-an-address", "10.9.9.9"),
    ],
)
def test_the_callers_address_counts_trusted_proxies_from_the_right(
    settings: Settings, count: int, forwarded: str, expected: str
) -> None:
    settings.TRUSTED_PROXY_COUNT = count
    request = RequestFactory().get("/", REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)

    assert client_address(request) == expected
