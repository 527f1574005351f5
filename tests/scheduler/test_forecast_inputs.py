"""The cluster's latest forecast inputs, reused by estimates and dry runs: an estimate from
reused inputs is the one fresh inputs give while the log has not moved, and the next
estimate after a submission sees it."""

from __future__ import annotations

import pytest

from scheduler import services
from scheduler.selectors.forecasts import forget_forecast_inputs, latest_forecast_inputs
from tests.builders import SYSTEM
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
