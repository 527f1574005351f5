"""Billing fixtures: a priced catalog, a customer, histories written to the log, and the
local Stripe the test command started."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from django.test import override_settings

from tests.builders import Builder
from tests.builders import commerce as commerce_builders
from tests.builders.history import SchedulingLog

WEBHOOK_SECRET = "whsec_neocloud_tests"


@dataclass
class History(SchedulingLog):
    """One project's scheduling events at chosen instants, in the scheduler's streams: a
    priced service's life (submitted against an offering, running, released)."""

    def submit(  # type: ignore[override]
        self,
        at: datetime,
        *,
        offering: str | None = "1xh100",
        plan: str = "on_demand",
        name: str = "w",
        reservation_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        return super().submit(
            at,
            price_plan=plan,
            offering=offering,
            kind="service",
            name=name,
            reservation_id=reservation_id,
            preemptible=plan == "preemptible",
            retry_limit=3,
            restart_policy="always",
        )

    def grant(  # type: ignore[override]
        self, workload_id: uuid.UUID, at: datetime, gpus: int = 1, milli: int = 1000
    ) -> uuid.UUID:
        return super().grant(workload_id, at, [(gpus, milli)])

    def release(  # type: ignore[override]
        self,
        workload_id: uuid.UUID,
        allocation_id: uuid.UUID,
        at: datetime,
        reason: str = "succeeded",
        status: str = "succeeded",
        ended_at: datetime | None = None,
    ) -> None:
        super().release(
            workload_id, allocation_id, at, reason=reason, status=status, ended_at=ended_at
        )

    def run(self, start: datetime, end: datetime, **submit: Any) -> uuid.UUID:
        """A workload granted at ``start``, running at once, done at ``end``; its allocation."""
        workload = self.submit(start, **submit)
        allocation = self.grant(workload, start)
        self.running(workload, allocation, start)
        self.release(workload, allocation, end)
        return allocation


@pytest.fixture
def shop() -> commerce_builders.Shop:
    return commerce_builders.shop()


@pytest.fixture
def customer(build: Builder, shop: commerce_builders.Shop) -> commerce_builders.Customer:
    return commerce_builders.customer(build)


@pytest.fixture
def history(customer: commerce_builders.Customer, shop: commerce_builders.Shop) -> History:
    return History(project=customer.project, cluster_id=shop.cluster.pk)


@pytest.fixture
def localstripe() -> Iterator[str]:
    """The local Stripe the test command started (``LOCALSTRIPE_URL``), as the gateway's."""
    url = os.environ.get("LOCALSTRIPE_URL")
    if not url:
        pytest.skip("needs localstripe: LOCALSTRIPE_URL is unset (make test starts one)")
    with override_settings(
        STRIPE_API_BASE=url, STRIPE_API_KEY="sk_test_neocloud", STRIPE_WEBHOOK_SECRET=WEBHOOK_SECRET
    ):
        yield url


def signed(event: dict[str, Any], secret: str = WEBHOOK_SECRET) -> tuple[bytes, str]:
    """A webhook delivery as Stripe (and localstripe) signs it."""
    payload = json.dumps(event).encode()
    stamp = int(time.time())
    digest = hmac.new(secret.encode(), b"%d.%s" % (stamp, payload), hashlib.sha256).hexdigest()
    return payload, f"t={stamp},v1={digest}"
