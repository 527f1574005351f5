"""The cluster's latest forecast inputs, reused by estimates, dry runs and the operator's
what-if: an estimate from reused inputs is the one fresh inputs give while nothing concerning
the cluster was logged, the next estimate after a submission to it sees it, and events of
another cluster leave them be."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.lifecycle import NodeState
from scheduler import services
from scheduler.models import Allocation
from scheduler.selectors.forecasts import forget_forecast_inputs, latest_forecast_inputs
from tests.builders import SYSTEM
from tests.builders.fleet import put_in_state
from tests.scheduler.conftest import Tenant, job, ready_fleet, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
HOUR = 3600.0


def _as_asked(tenant: Tenant) -> tuple[object, ...]:
    answer = services.workload_estimate(
        actor=SYSTEM, project=tenant.project, spec=job("probe", gpus=8, runtime_estimate_s=HOUR)
    ).as_asked
    return answer.start, answer.earliest, answer.latest, answer.basis


def test_reused_inputs_give_the_estimate_fresh_ones_give_and_a_submission_is_seen(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    submitted(tenant.project, "running", gpus=8, runtime_estimate_s=HOUR)
    forget_forecast_inputs()

    fresh = _as_asked(tenant)
    kept = latest_forecast_inputs(fleet.cluster.pk)
    reused = _as_asked(tenant)

    assert latest_forecast_inputs(fleet.cluster.pk) is kept  # nothing changed: reused
    assert reused == fresh
    assert fresh[0] is not None

    # A workload submitted ahead of the probe: the next estimate waits behind it too.
    ahead = submitted(tenant.project, "ahead", gpus=8, runtime_estimate_s=HOUR)
    assert ahead.status == "admitted"
    after = _as_asked(tenant)

    assert latest_forecast_inputs(fleet.cluster.pk) is not kept
    assert after[0] is not None
    assert after[0] > fresh[0]  # type: ignore[operator]
    forget_forecast_inputs()
    assert _as_asked(tenant) == after


def test_events_of_another_cluster_leave_the_inputs_be_a_node_change_in_it_does_not(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    other = ready_fleet(nodes=1, gpus=8, slug="ams1")
    submitted(tenant.project, "running", gpus=8, runtime_estimate_s=HOUR)
    forget_forecast_inputs()
    kept = latest_forecast_inputs(fleet.cluster.pk)

    # Submitted, admitted and granted on the other cluster; its node drained.
    elsewhere = submitted(tenant.project, "elsewhere", gpus=8, cluster=other.cluster.pk)
    put_in_state(other.nodes[0], NodeState.DRAINING)

    assert elsewhere.cluster_id == other.cluster.pk
    assert elsewhere.status == "running"
    assert latest_forecast_inputs(fleet.cluster.pk) is kept

    # A node of this cluster drained: read again.
    put_in_state(fleet.nodes[1], NodeState.DRAINING)
    assert latest_forecast_inputs(fleet.cluster.pk) is not kept


def _reads_allocations(queries: CaptureQueriesContext) -> bool:
    table = Allocation._meta.db_table
    return any(table in query["sql"] for query in queries.captured_queries)


def test_the_operators_what_if_keeps_the_inputs_it_reads_and_reuses_them(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    submitted(tenant.project, "running", gpus=8, runtime_estimate_s=HOUR)
    submitted(tenant.project, "next", gpus=8, runtime_estimate_s=HOUR)
    drain = [fleet.nodes[0].pk]
    forget_forecast_inputs()

    first = services.cluster_what_if(actor=SYSTEM, cluster=fleet.cluster, drain=drain)
    with CaptureQueriesContext(connection) as again:
        second = services.cluster_what_if(actor=SYSTEM, cluster=fleet.cluster, drain=drain)
    with CaptureQueriesContext(connection) as estimate:
        _as_asked(tenant)

    assert (first.waiting, first.never_after) == (1, 1)
    assert second == first
    assert not _reads_allocations(again)  # the running work, the runtimes, the usage: kept
    assert not _reads_allocations(estimate)  # the estimate reuses what the what-if read
