"""Real workloads through the scheduler in process: what it granted and released is what is
metered, and ``manage.py replay`` rebuilds the same usage."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from inventory import services as inventory
from inventory.models import Node
from metering import selectors
from metering.models import OpenAllocation, UsageSlice
from scheduler import services as scheduler
from scheduler import tasks
from scheduler.models import Allocation, Workload
from tests.builders import run
from tests.builders.fleet import OPERATOR
from tests.builders.history import catch_up
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_what_the_scheduler_granted_and_released_is_metered_and_replays(
    tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    short = run(scheduler.workload_submit, project=tenant.project, spec=job("short", gpus=2))
    long = run(
        scheduler.workload_submit,
        project=tenant.project,
        spec=job("long", gpus=4, runtime_estimate_s=600, preemptible=True),
    )
    time.sleep(0.3)
    tasks.tick()
    assert Workload.objects.get(pk=short.pk).status == "succeeded"
    assert Workload.objects.get(pk=long.pk).status == "running"
    catch_up()

    closed = Allocation.objects.get(workload=short)
    assert closed.released_at is not None
    expected = (
        closed.gpu_milli
        * ((closed.released_at - closed.granted_at) // timedelta(microseconds=1))
        // 1_000_000
    )
    start = timezone.now() - timedelta(days=1)
    end = timezone.now() + timedelta(days=1)
    lines = {
        line.allocation_ids: line
        for line in selectors.usage_lines(tenant.organization.pk, start, end)
    }
    assert lines[(closed.pk,)].milli_gpu_seconds == expected
    assert lines[(closed.pk,)].price_plan == "on_demand"
    assert lines[(closed.pk,)].region == "eu"
    running = Allocation.objects.get(workload=long)
    assert list(OpenAllocation.objects.values_list("allocation_id", flat=True)) == [running.pk]
    assert lines[(running.pk,)].price_plan == "preemptible"
    assert lines[(running.pk,)].milli_gpu_seconds > 0

    live = sorted(UsageSlice.objects.values_list("allocation_id", "day", "milli_gpu_seconds"))
    call_command("replay", verbosity=0)
    assert (
        sorted(UsageSlice.objects.values_list("allocation_id", "day", "milli_gpu_seconds")) == live
    )
    assert list(OpenAllocation.objects.values_list("allocation_id", flat=True)) == [running.pk]


def test_a_failed_nodes_run_is_metered_to_its_last_heartbeat_and_replays(
    tenant: Tenant, in_process: None
) -> None:
    (node,) = ready_fleet(nodes=1, gpus=8).nodes
    workload = run(
        scheduler.workload_submit,
        project=tenant.project,
        spec=job("long", gpus=8, runtime_estimate_s=600),
    )
    granted = Allocation.objects.get(workload=workload)
    heard = granted.granted_at + timedelta(milliseconds=200)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=heard)  # telemetry, in place
    time.sleep(0.6)  # the node goes silent; the failure is detected well after

    failed = inventory.heartbeats_check(actor=OPERATOR, threshold=timedelta(milliseconds=300))
    catch_up()

    assert [n.pk for n in failed] == [node.pk]
    released = Allocation.objects.get(pk=granted.pk)
    assert released.release_reason == "node_failure"
    assert released.released_at is not None
    assert released.released_at - heard > timedelta(milliseconds=300)
    expected = (
        granted.gpu_milli * ((heard - granted.granted_at) // timedelta(microseconds=1)) // 1_000_000
    )
    start, end = heard - timedelta(days=1), heard + timedelta(days=1)
    lines = {
        line.allocation_ids: line
        for line in selectors.usage_lines(tenant.organization.pk, start, end)
    }
    assert lines[(granted.pk,)].milli_gpu_seconds == expected
    live = sorted(UsageSlice.objects.values_list("allocation_id", "end_at", "milli_gpu_seconds"))
    assert live == [(granted.pk, heard, expected)]
    call_command("replay", verbosity=0)
    assert (
        sorted(UsageSlice.objects.values_list("allocation_id", "end_at", "milli_gpu_seconds"))
        == live
    )
