"""What scheduling learns from other apps, and tells them, without importing them: apps
that depend on the scheduler (orders, billing, metering) register here in their
``AppConfig.ready`` (``neocloud.core.hooks``; the table of docs/architecture/scheduling-service.md
lists them all).

- ``payment_check`` (``first``): takes the organization and answers None (it may start work)
  or the reason it may not, e.g. ``"invoice INV-0042 is unpaid"``: new work is then refused
  with ``payment_required``. Billing's dunning and metering's budget hard stop register one.
- ``usage_meter`` (``first``): the UTC month's metered milli-GPU-seconds per GPU model of an
  organization (or one of its projects) up to ``now``, against which quotas'
  ``monthly_gpu_hours`` are enforced. Metering registers it.
- ``approval_threshold`` (``first``): GPUs above which work starts only through an order an
  operator approved. Orders registers it.
- ``offering_workload_spec`` (``first``): the workload spec of a submission straight against a
  catalog offering, checked as an order of it is. Orders registers it.
- ``gpu_hour_price`` (``first``): the price per GPU-hour, in minor units and its currency, of
  work on a GPU model under a price plan (from an offering, in a region, or none): what the
  what-if quotes beside each estimate. Billing registers it (its ``PriceBook``'s rules).
- ``workload_ended`` (``on_commit``): each workload that reached a final status, after that
  commits (in a transaction of its own: it may lock its rows before the log's lock).
- ``endpoints_changed`` (``on_commit``): a workload whose endpoints an agent's report changed,
  after that commits. The web gateway registers it to route its web ports.
- ``reservation_ended`` (``on_commit``): each reservation cancelled, and why, after that
  commits. A window that runs out is no event: apps following reservations check
  ``ends_at`` periodically.
- ``cycle_finished`` (``call_all``): a cycle that decided, told how it went (cluster id, seconds
  it took, allocations granted, workloads preempted, workloads left waiting); monitoring
  registers it. It runs on the scheduler's path: an answer must be cheap and never raise.
- ``start_estimate_checked`` (``on_commit``): a workload that waited started; how far off its
  start-time estimates were (cluster id, ``"at_submission"`` or ``"latest"``, seconds).
  Monitoring registers it.

A hook function that fails on commit is lost: its app reconciles periodically.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from neocloud.core.hooks import Hook
from scheduler.models import Reservation, Workload
from scheduler.specs import WorkloadSpec
from tenants.models import Organization

payment_check: Hook[[Organization], str | None] = Hook("scheduler.payment_check")
usage_meter: Hook[[uuid.UUID, uuid.UUID | None, datetime], Mapping[str, int]] = Hook(
    "scheduler.usage_meter"
)
approval_threshold: Hook[[], int] = Hook("scheduler.approval_threshold")
# (offering slug, region, the request's other fields)
offering_workload_spec: Hook[[str, str | None, Mapping[str, Any]], WorkloadSpec] = Hook(
    "scheduler.offering_workload_spec"
)
# (offering slug or None, region or None, price plan, GPU model) -> (minor, currency)
gpu_hour_price: Hook[[str | None, str | None, str, str], tuple[int, str] | None] = Hook(
    "scheduler.gpu_hour_price"
)
workload_ended: Hook[[Workload], None] = Hook("scheduler.workload_ended")
reservation_ended: Hook[[Reservation, str], None] = Hook("scheduler.reservation_ended")
# (workload id) after its endpoints changed commits; the web gateway registers it (issue 32)
endpoints_changed: Hook[[uuid.UUID], None] = Hook("scheduler.endpoints_changed")
# (cluster id, seconds, granted, preempted, waiting)
cycle_finished: Hook[[uuid.UUID, float, int, int, int], None] = Hook("scheduler.cycle_finished")
# (cluster id, kind of estimate, |estimated - actual start| in seconds)
start_estimate_checked: Hook[[uuid.UUID, str, float], None] = Hook(
    "scheduler.start_estimate_checked"
)
