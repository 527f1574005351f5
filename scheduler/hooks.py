"""What scheduling learns from other apps, and tells them, without importing them: apps
that depend on the scheduler (orders, billing, metering) register here when they load.

- Payment checks (billing's dunning, metering's budget hard stop) take the organization and
  return None (it may start work) or the reason it may not, e.g. ``"invoice INV-0042 is
  unpaid"``: new work is then refused with ``payment_required``. No check: no refusal.
- The usage meter (metering) gives the UTC month's metered milli-GPU-seconds per GPU model,
  against which quotas' ``monthly_gpu_hours`` are enforced.
- The approval threshold (orders): work of more GPUs than this starts only through an
  order an operator approved.
- Workload and reservation ends are told, on commit, to whoever follows them (orders).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime

from django.db import transaction

from scheduler.models import Reservation, Workload
from tenants.models import Organization

PaymentCheck = Callable[[Organization], str | None]
UsageMeter = Callable[[uuid.UUID, uuid.UUID | None, datetime], Mapping[str, int]]
ApprovalThreshold = Callable[[], int]
WorkloadEnded = Callable[[Workload], None]
ReservationEnded = Callable[[Reservation, str], None]  # and why it ended

_payment_checks: list[PaymentCheck] = []
_usage_meters: list[UsageMeter] = []
_approval_thresholds: list[ApprovalThreshold] = []
_workload_ended: list[WorkloadEnded] = []
_reservation_ended: list[ReservationEnded] = []


def register_payment_check(check: PaymentCheck) -> PaymentCheck:
    """Add a check (usable as a decorator); registering the same function again is a no-op."""
    if check not in _payment_checks:
        _payment_checks.append(check)
    return check


def unregister_payment_check(check: PaymentCheck) -> None:
    if check in _payment_checks:
        _payment_checks.remove(check)


def payment_refusal(organization: Organization) -> str | None:
    """The first refusal of the registered checks, or None."""
    for check in _payment_checks:
        refusal = check(organization)
        if refusal:
            return refusal
    return None


def register_usage_meter(meter: UsageMeter) -> None:
    """The one meter of GPU-hours: a later registration replaces an earlier one."""
    _usage_meters[:] = [meter]


def month_usage(
    organization_id: uuid.UUID, project_id: uuid.UUID | None, now: datetime
) -> Mapping[str, int]:
    """Milli-GPU-seconds per GPU model of the UTC month of ``now`` so far, of an organization
    or one of its projects; nothing without a meter."""
    return _usage_meters[0](organization_id, project_id, now) if _usage_meters else {}


def register_approval_threshold(threshold: ApprovalThreshold) -> None:
    _approval_thresholds[:] = [threshold]


def approval_threshold() -> int | None:
    """GPUs above which work waits for an operator; None: no threshold registered."""
    return _approval_thresholds[0]() if _approval_thresholds else None


def on_workload_ended(hook: WorkloadEnded) -> None:
    """Call ``hook`` with each workload that reaches a final status, after that commits (in
    a transaction of its own: it may lock its rows before the log's lock). A hook that fails
    is lost: its app reconciles periodically."""
    if hook not in _workload_ended:
        _workload_ended.append(hook)


def workload_ended(workload: Workload) -> None:
    def notify() -> None:
        for hook in _workload_ended:
            hook(workload)

    transaction.on_commit(notify)


def on_reservation_ended(hook: ReservationEnded) -> None:
    """Call ``hook`` with each reservation cancelled, after that commits. A window that runs
    out is no event: apps following reservations check ``ends_at`` periodically."""
    if hook not in _reservation_ended:
        _reservation_ended.append(hook)


def reservation_ended(reservation: Reservation, why: str) -> None:
    def notify() -> None:
        for hook in _reservation_ended:
            hook(reservation, why)

    transaction.on_commit(notify)
