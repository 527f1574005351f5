"""A dry run of a submission: every check of ``workload_submit``, then one engine cycle on
the cluster as its tables stand now (its latest forecast inputs, ``latest_forecast_inputs``),
with the workload added to what waits. Nothing is written: no event, no row; the engine it
runs is thrown away.

The answer is what a cycle run now would decide for it, the work already waiting ordered
with it as a cycle orders it; the cycle that follows a real submission may see a cluster
that moved meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from scheduler.engine.cycle import Scheduler
from scheduler.selectors.forecasts import latest_forecast_inputs
from scheduler.services.standing import check_forecast_rate
from scheduler.services.submission import check_submission
from scheduler.snapshot import placements_of, reason_shown, request_of, waiting_of
from scheduler.specs import WorkloadSpec
from scheduler.standing import held_back
from tenants.access import Actor
from tenants.models import Project


@dataclass(frozen=True)
class DryRun:
    """Whether the engine would place the workload now: where (``placement``, as an
    allocation's ``placements``), else why not (``reason``, as its ``pending_reason``)."""

    could_run_now: bool
    reason: dict[str, Any] | None
    gpu_model: str | None
    placement: list[dict[str, Any]] | None
    preempts: int  # running workloads it would take GPUs back from


def workload_dry_run(*, actor: Actor, project: Project, spec: WorkloadSpec) -> DryRun:
    """What ``workload_submit`` would refuse (the same errors), else what the engine would
    decide for the workload now."""
    submitted = check_submission(actor=actor, project=project, spec=spec)
    check_forecast_rate(project.organization_id)
    now = timezone.now()
    inputs = latest_forecast_inputs(submitted.cluster_id)
    view = inputs.view
    candidate = request_of({**submitted.model_dump(), "submitted_at": now})
    # The cycle's engine as ``scheduling._decide`` runs it: the running work, fair share's
    # usage in the policy, the line without the work held back.
    engine = Scheduler(inputs.snapshot, inputs.policy)
    ahead, _ = held_back(waiting_of(view))
    decisions = engine.cycle([*ahead, candidate], now.timestamp())
    granted = next((a for a in decisions.allocations if a.workload == candidate.id), None)
    if granted is None:
        reason = decisions.pending[candidate.id]
        return DryRun(False, reason_shown(reason, view.node_names), None, None, 0)
    return DryRun(
        could_run_now=True,
        reason=None,
        gpu_model=granted.gpu_model,
        placement=[p.model_dump(mode="json") for p in placements_of(view, granted)],
        preempts=sum(1 for p in decisions.preemptions if p.for_workload == candidate.id),
    )
