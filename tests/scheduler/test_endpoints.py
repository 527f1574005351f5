"""Where a run's ports are reached: recorded in the workload's stream as node agents report
them, merged across the gang's nodes, cleared when the run ends, and the same after a replay."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from events import store
from neocloud.core.errors import ValidationFailed
from scheduler import events as ev
from scheduler import services
from scheduler.models import Workload
from tests.builders import Builder, run
from tests.builders.history import SchedulingLog

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(hours=1)
RANK0 = {"port": 8000, "address": "10.0.0.5:8000", "node": "n0", "kind": "port"}
RANK1 = {"port": 8000, "address": "10.0.0.6:8000", "node": "n1", "kind": "port"}


@dataclass
class Run:
    log: SchedulingLog
    workload: uuid.UUID
    allocation: uuid.UUID


@pytest.fixture
def a_run(build: Builder) -> Run:
    project = build.project(build.organization("Acme"))
    log = SchedulingLog(project=project, cluster_id=uuid.uuid4())
    workload = log.submit(START, kind="service", program={"ports": [8000]})
    allocation = log.grant(workload, START, [(1, 1000), (1, 1000)])
    log.running(workload, allocation, START)
    return Run(log=log, workload=workload, allocation=allocation)


def report(a_run: Run, endpoints: list[dict[str, Any]], **kwargs: Any) -> Workload:
    return run(  # type: ignore[no-any-return]
        services.workload_endpoints_set,
        workload=Workload.objects.get(pk=a_run.workload),
        endpoints=endpoints,
        **kwargs,
    )


def reported(a_run: Run) -> list[dict[str, Any]]:
    return [
        e.data
        for e in store.read_stream(ev.WORKLOAD_STREAM, str(a_run.workload))
        if e.type == ev.WorkloadEndpointsReported.event_type
    ]


def test_reports_set_the_endpoints_and_merge_the_nodes(a_run: Run) -> None:
    report(a_run, [RANK1])
    merged = report(a_run, [RANK0], allocation_id=a_run.allocation)
    resent = report(a_run, [RANK0])

    assert merged.endpoints == resent.endpoints == [RANK0, RANK1]
    assert Workload.objects.get(pk=a_run.workload).endpoints == [RANK0, RANK1]
    assert [len(e["endpoints"]) for e in reported(a_run)] == [1, 2]  # the resend: no event
    assert reported(a_run)[-1]["allocation_id"] == str(a_run.allocation)


def test_a_node_reporting_again_replaces_its_own(a_run: Run) -> None:
    report(a_run, [RANK0, RANK1])
    moved = RANK0 | {"address": "10.0.0.9:8000"}

    shown = report(a_run, [moved])

    assert shown.endpoints == [moved, RANK1]


def test_the_run_end_clears_them_and_a_late_report_is_dropped(a_run: Run) -> None:
    report(a_run, [RANK0])
    a_run.log.release(a_run.workload, a_run.allocation, START + timedelta(minutes=5))

    late = report(a_run, [RANK1], allocation_id=a_run.allocation)

    assert Workload.objects.get(pk=a_run.workload).endpoints == []
    assert late.endpoints == []
    assert len(reported(a_run)) == 1


def test_a_report_of_an_earlier_run_changes_nothing(a_run: Run) -> None:
    report(a_run, [RANK0], allocation_id=uuid.uuid4())

    assert Workload.objects.get(pk=a_run.workload).endpoints == []
    assert reported(a_run) == []


def test_a_preemption_clears_them(a_run: Run) -> None:
    report(a_run, [RANK0])

    a_run.log.preempt(a_run.workload, a_run.allocation, START + timedelta(minutes=5))

    assert Workload.objects.get(pk=a_run.workload).endpoints == []


@pytest.mark.parametrize(
    "endpoint",
    [
        RANK0 | {"port": 0},
        RANK0 | {"port": 70000},
        RANK0 | {"port": "8000"},
        RANK0 | {"node": ""},
        {"port": 8000, "address": "10.0.0.5:8000"},
        RANK0 | {"extra": 1},
    ],
    ids=["port-0", "port-too-large", "port-string", "no-node", "node-missing", "extra-key"],
)
def test_a_bad_endpoint_is_refused(a_run: Run, endpoint: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed) as refused:
        report(a_run, [endpoint])

    assert list(refused.value.fields) == ["endpoints"]
    assert reported(a_run) == []


def _state() -> list[tuple[Any, ...]]:
    return sorted(
        Workload.objects.values_list("id", "status", "endpoints", "allocation_id", "version")
    )


def test_a_replay_equals_live_with_endpoints(a_run: Run) -> None:
    report(a_run, [RANK0, RANK1])
    ended = a_run.log.submit(START)
    allocation = a_run.log.grant(ended, START, [(1, 1000)])
    a_run.log.running(ended, allocation, START)
    run(
        services.workload_endpoints_set,
        workload=Workload.objects.get(pk=ended),
        endpoints=[RANK0],
    )
    a_run.log.release(ended, allocation, START + timedelta(minutes=1), status="succeeded")
    live = _state()
    assert [w[2] for w in live if w[0] == a_run.workload] == [[RANK0, RANK1]]

    call_command("replay", "scheduler.scheduling", verbosity=0)

    assert _state() == live
