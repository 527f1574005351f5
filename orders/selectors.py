"""Order reads: the approval threshold, and the fulfilled orders whose work has ended.

Nothing here locks: ``orders_close_ended`` closes each order it is given in a transaction of
its own, which locks the order's row and checks its status again.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db.models import Q

from orders.models import ApprovalPolicy, Order, OrderStatus
from scheduler.models import FINAL_STATUSES, Reservation, ReservationStatus, Workload

DEFAULT_APPROVAL_THRESHOLD_GPUS = 64


def approval_policy() -> ApprovalPolicy | None:
    """The operators' setting; None until they first set it."""
    return ApprovalPolicy.objects.filter(pk=1).first()


def approval_threshold() -> int:
    """Orders of more GPUs than this wait for an operator."""
    policy = approval_policy()
    return policy.threshold_gpus if policy else DEFAULT_APPROVAL_THRESHOLD_GPUS


def orders_ended(*, now: datetime) -> list[tuple[Order, str]]:
    """The fulfilled orders whose workload has ended or whose reservation was cancelled or is
    over at ``now``, oldest first, each with why it ends."""
    ended_workloads = Workload.objects.filter(status__in=FINAL_STATUSES)
    ended_reservations = Reservation.objects.filter(
        Q(status=ReservationStatus.CANCELLED) | Q(ends_at__lte=now)
    )
    closing = Order.objects.filter(status=OrderStatus.FULFILLED).filter(
        Q(workload_id__in=ended_workloads.values("pk"))
        | Q(reservation_id__in=ended_reservations.values("pk"))
    )
    workloads: dict[uuid.UUID | None, Workload] = {
        w.pk: w for w in ended_workloads.filter(pk__in=closing.values("workload_id"))
    }
    reservations: dict[uuid.UUID | None, Reservation] = {
        r.pk: r for r in ended_reservations.filter(pk__in=closing.values("reservation_id"))
    }
    ended = []
    for order in closing.order_by("created_at", "id"):
        if order.workload_id in workloads:
            workload = workloads[order.workload_id]
            why = f"workload {workload.name} {workload.status}"
        else:
            reservation = reservations[order.reservation_id]
            why = (
                "reservation cancelled"
                if reservation.status == ReservationStatus.CANCELLED
                else f"reservation ended at {reservation.ends_at:%Y-%m-%d %H:%M} UTC"
            )
        ended.append((order, why))
    return ended
