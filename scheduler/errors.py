"""Errors of scheduling: each a stable code an integrator can act on."""

from __future__ import annotations

from neocloud.errors import ApplicationError, Conflict


class Unschedulable(ApplicationError):
    """The workload could never run here as asked (no such GPUs, a shape no node has)."""

    code = "unschedulable"
    http_status = 400


class QuotaExceeded(ApplicationError):
    """It asks more GPUs than the quota will ever allow."""

    code = "quota_exceeded"
    http_status = 400


class WorkloadFinished(Conflict):
    code = "workload_finished"
    retryable = False


class ReservationConflict(Conflict):
    code = "reservation_unavailable"
    retryable = False
