"""Scheduling writes: policy (priority classes, queues), workloads and reservations, and the
states of runs. Each write of an existing workload locks the workload's row (after the log's
append lock) and appends to its stream with the version it read; the scheduling service
(``scheduling``) is told on commit. Each module states what it locks.

Every way of starting work (an order, the workloads and reservations API, an admin action)
ends in ``workload_submit`` or ``reservation_create``, so the rules of new work live here:
the organization's standing (``check_standing``: active, payment, the month's GPU-hours),
the approval threshold (larger work only through an approved order), quotas, and the price
plan, which follows from what the workload is.

- ``policy``: priority classes, queues.
- ``standing``: the organization's standing and the approval threshold.
- ``shape``: what a spec may ask for, and the cluster it goes to.
- ``submission``: ``workload_submit``, and ``check_submission``, all it checks.
- ``batch``: ``workload_submit_array`` and ``workload_submit_batch``, many at once, all or
  none, through the same checks.
- ``dry_run``: ``workload_dry_run``, the same checks and the engine's say, nothing written.
- ``what_if``: ``workload_estimate`` (when it would start, per GPU model, and its price) and
  ``cluster_what_if`` (what a drain or a reservation would do to the waiting work's
  estimates), the forecast run on the live state, nothing written.
- ``cancellation``: ``workload_cancel``.
- ``run_states``: a run's provisioning, running and end.
- ``reservations``: ``reservation_create``, ``reservation_cancel``.
- ``endpoints``: ``workload_endpoints_set``, where a run's ports are reached.
- ``workload_stream``: the lock and append the workload writes share.
- ``fragmentation``: ``fragmentation_sample``, the operators' chart's telemetry (not events).
- ``estimates``: ``workload_estimates_refresh``, start-time estimates of waiting work
  (derived data, not events).
- ``notices``: ``run_notice_give``, a run told it is stopped soon (preempted, its maximum).
"""

from scheduler.services.batch import workload_submit_array, workload_submit_batch
from scheduler.services.cancellation import workload_cancel
from scheduler.services.dry_run import DryRun, workload_dry_run
from scheduler.services.endpoints import workload_endpoints_set
from scheduler.services.estimates import EstimatesRefreshed, workload_estimates_refresh
from scheduler.services.fragmentation import fragmentation_sample
from scheduler.services.notices import notice_s, run_notice_give, run_notice_of
from scheduler.services.policy import priority_class_define, queue_configure
from scheduler.services.reservations import reservation_cancel, reservation_create
from scheduler.services.run_states import (
    run_discarded,
    run_ended,
    run_holder,
    run_holders,
    run_provisioning,
    run_started,
    runs_ended,
    runs_provisioning,
    runs_started,
)
from scheduler.services.standing import check_standing
from scheduler.services.submission import check_submission, workload_submit
from scheduler.services.what_if import (
    AsAsked,
    ClusterWhatIf,
    ModelEstimate,
    ReservationAsked,
    WorkloadEstimates,
    cluster_what_if,
    estimates_in_words,
    workload_estimate,
)

__all__ = [
    "AsAsked",
    "ClusterWhatIf",
    "DryRun",
    "EstimatesRefreshed",
    "ModelEstimate",
    "ReservationAsked",
    "WorkloadEstimates",
    "check_standing",
    "check_submission",
    "cluster_what_if",
    "estimates_in_words",
    "fragmentation_sample",
    "notice_s",
    "priority_class_define",
    "queue_configure",
    "reservation_cancel",
    "reservation_create",
    "run_discarded",
    "run_ended",
    "run_holder",
    "run_holders",
    "run_notice_give",
    "run_notice_of",
    "run_provisioning",
    "run_started",
    "runs_ended",
    "runs_provisioning",
    "runs_started",
    "workload_cancel",
    "workload_dry_run",
    "workload_endpoints_set",
    "workload_estimate",
    "workload_estimates_refresh",
    "workload_submit",
    "workload_submit_array",
    "workload_submit_batch",
]
