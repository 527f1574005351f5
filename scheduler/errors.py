"""Errors of scheduling: each a stable code an integrator can act on."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, Conflict


class Unschedulable(ApplicationError):
    """The workload could never run here as asked (no such GPUs, a shape no node has)."""

    code = "unschedulable"
    http_status = 400


class QuotaExceeded(ApplicationError):
    """It asks more GPUs than the quota will ever allow."""

    code = "quota_exceeded"
    http_status = 400


class WorkloadFinished(Conflict):
    """The workload has ended (or holds no GPUs): nothing to cancel or change."""

    code = "workload_finished"
    retryable = False


class ReservationConflict(Conflict):
    """The window's GPUs are already reserved: the reservation does not fit (``details``: fleet,
    reserved)."""

    code = "reservation_unavailable"
    retryable = False


class PaymentRequired(ApplicationError):
    """Billing or a budget's hard stop refuses new work until the organization pays."""

    code = "payment_required"
    http_status = 400


class TooMuchWaiting(ApplicationError):
    """The organization or project has as much work waiting as it may: more waits its turn
    outside (``WAITING_WORKLOADS_PER_ORGANIZATION``, ``..._PER_PROJECT``)."""

    code = "too_much_waiting"
    http_status = 409


class TooMuchReserved(ApplicationError):
    """With a new reservation the organization would hold more GPUs reserved at once than it
    may (``RESERVED_GPUS_PER_ORGANIZATION``)."""

    code = "too_much_reserved"
    http_status = 409


class ForecastsExhausted(ApplicationError):
    """The organization asked for more estimates and dry runs this minute than it may: each
    runs the engine over the whole line (``FORECASTS_PER_MINUTE_PER_ORGANIZATION``)."""

    code = "throttled"
    http_status = 429


class ApprovalRequired(ApplicationError):
    """More GPUs than the approval threshold start only through an approved order."""

    code = "approval_required"
    http_status = 403


class GpuHoursExhausted(Conflict):
    """A quota's GPU-hours for this month are spent: new work of that model waits for the
    next month (or a larger quota); running work goes on."""

    code = "gpu_hours_exhausted"
    retryable = False


class BatchRefused(ApplicationError):
    """An item of a batch is refused, so the whole batch is: ``details.errors`` names each
    refused item (its index), the field and the single submission's code and message."""

    code = "batch_refused"
    http_status = 400
