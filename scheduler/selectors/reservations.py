"""Reads of reservations: those holding GPUs in a window, and those billing charges."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

from django.db.models import QuerySet

from scheduler.models import Reservation, ReservationStatus, Workload


def reservations_overlapping(starts_at: datetime, ends_at: datetime) -> QuerySet[Reservation]:
    """Active reservations whose window meets ``[starts_at, ends_at)``."""
    return Reservation.objects.filter(
        status=ReservationStatus.ACTIVE, starts_at__lt=ends_at, ends_at__gt=starts_at
    )


def reservations_for_billing(
    organization_id: uuid.UUID, start: datetime, end: datetime
) -> QuerySet[Reservation]:
    """The organization's reservations overlapping ``[start, end)`` that are a commitment:
    every one but those cancelled free of charge (before the notice period)."""
    return Reservation.objects.filter(
        organization_id=organization_id, starts_at__lt=end, ends_at__gt=start
    ).exclude(status=ReservationStatus.CANCELLED, cancellation_charged=False)


def workloads_on_reservations(
    reservation_ids: Collection[uuid.UUID],
) -> dict[uuid.UUID, list[uuid.UUID]]:
    """The workloads submitted on each of ``reservation_ids`` (billing rates their usage)."""
    on: dict[uuid.UUID, list[uuid.UUID]] = {r: [] for r in reservation_ids}
    for workload_id, reservation_id in Workload.objects.filter(
        reservation_id__in=reservation_ids
    ).values_list("id", "reservation_id"):
        if reservation_id is not None:  # the filter says so; the type does not
            on[reservation_id].append(workload_id)
    return on
