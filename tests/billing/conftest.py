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

from scheduler import events as ev
from tests.builders import Builder
from tests.builders import commerce as commerce_builders
from tests.builders.history import SchedulingLog

WEBHOOK_SECRET = "whsec_neocloud_tests"


@dataclass
class History(SchedulingLog):
    """One project's scheduling events at chosen instants, in the scheduler's streams: a
    priced service's life (submitted against an offering, running, released)."""

    def submit(
        self,
        at: datetime,
        *,
        offering: str | None = "1xh100",
        plan: str = "on_demand",
        name: str = "w",
    ) -> uuid.UUID:
        workload_id = uuid.uuid4()
        self._append(
            ev.WORKLOAD_STREAM,
            workload_id,
            ev.WorkloadSubmitted(
                workload_id=workload_id,
                organization_id=self.project.organization_id,
                project_id=self.project.pk,
                cluster_id=self.cluster_id,
                name=name,
                kind="service",
                gpu_models=["h100"],
                gpus_per_node=1,
                nodes=1,
                min_nodes=None,
                gpu_milli=1000,
                cpu_milli=1000,
                memory_mib=1024,
                priority_class="default",
                priority=0,
                preemptible=plan == "preemptible",
                topology="any",
                runtime_estimate_s=None,
                max_runtime_s=None,
                retry_limit=3,
                restart_policy="always",
                reservation_id=None,
                price_plan=plan,
                offering=offering,
                order_id=None,
            ),
            at,
        )
        return workload_id

    def grant(
        self, workload_id: uuid.UUID, at: datetime, gpus: int = 1, milli: int = 1000
    ) -> uuid.UUID:
        allocation_id = uuid.uuid4()
        self._append(
            ev.SCHEDULE_STREAM,
            self.cluster_id,
            ev.AllocationGranted(
                allocation_id=allocation_id,
                workload_id=workload_id,
                organization_id=self.project.organization_id,
                project_id=self.project.pk,
                gpu_model="h100",
                placements=[
                    ev.PlacementData(
                        node_id=uuid.uuid4(),
                        node="n0",
                        gpus=list(range(gpus)),
                        gpu_milli=milli,
                        cpu_milli=1000,
                        memory_mib=1024,
                    )
                ],
                granted_at=at,
            ),
            at,
        )
        return allocation_id

    def running(self, workload_id: uuid.UUID, allocation_id: uuid.UUID, at: datetime) -> None:
        self._append(
            ev.WORKLOAD_STREAM,
            workload_id,
            ev.WorkloadRunning(allocation_id=allocation_id, started_at=at, details={}),
            at,
        )

    def release(
        self,
        workload_id: uuid.UUID,
        allocation_id: uuid.UUID,
        at: datetime,
        reason: str = "succeeded",
        status: str = "succeeded",
    ) -> None:
        self._append(
            ev.WORKLOAD_STREAM,
            workload_id,
            ev.AllocationReleased(
                allocation_id=allocation_id,
                cluster_id=self.cluster_id,
                reason=reason,
                message="",
                status=status,
                released_at=at,
            ),
            at,
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
