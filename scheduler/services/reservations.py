"""Reservations: GPUs of a model held for a project's queue in a window, and their
cancellation (docs/user-guide/reservations.md).

``reservation_create`` checks the organization's standing unlocked, then takes the log's
append lock before the checks that read other reservations (the approval threshold and the
organization's cap on what it holds at once, its quota, the cluster's capacity), so that two
reservations never both fit in the same GPUs: no row lock (an order appends before it
reserves, and no row is locked after the log's lock, ``neocloud.core.transactions``).
``reservation_cancel`` locks the reservation's row, then appends, with whether the window
stays billed; whoever follows the reservation (its order) is told on commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from events import store
from events.store import NO_STREAM
from inventory.selectors import nodes_with_capacity
from neocloud.core.transactions import row_lock
from scheduler import events as ev
from scheduler import hooks, triggers
from scheduler.errors import QuotaExceeded, ReservationConflict, TooMuchReserved
from scheduler.models import Reservation, ReservationStatus
from scheduler.selectors import reservations_overlapping
from scheduler.services.shape import check_shape, cluster_for, invalid
from scheduler.services.standing import check_approval, check_standing
from scheduler.specs import RESERVATION_HORIZON, RESERVATION_START_TOLERANCE, WorkloadSpec
from tenants.access import Action, Actor
from tenants.models import Organization, Project, Quota


def reservation_create(
    *,
    actor: Actor,
    project: Project,
    gpu_model: str,
    gpus: int,
    starts_at: datetime,
    ends_at: datetime,
    region: str | None = None,
    offering: str | None = None,
    order_id: uuid.UUID | None = None,
) -> Reservation:
    """Hold ``gpus`` of ``gpu_model`` for the project's queue in a window. Refused when the
    reservations overlapping the window already hold what the cluster has of that model, or
    with this one would hold more than the project's or the organization's quota; when the
    organization may not start work (``check_standing``); over the approval threshold,
    counted with what the organization already holds of the model at once in the window,
    unless it fulfils an approved order (``order_id``); and past the organization's cap on
    GPUs reserved at once (``RESERVED_GPUS_PER_ORGANIZATION``).

    Those checks run under the log's append lock: they read the organization's reservations
    on every cluster, and the cluster's."""
    organization = Organization.objects.get(pk=project.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization)
    if gpus < 1:
        raise invalid("gpus", "gpus must be at least 1")
    if ends_at <= starts_at:
        raise invalid("ends_at", "the window must end after it starts")
    now = timezone.now()
    if ends_at <= now:
        raise invalid("ends_at", "the window is over")
    # An order's window was checked when it was placed; its approval may come after the start.
    if order_id is None and starts_at < now - RESERVATION_START_TOLERANCE:
        raise invalid("starts_at", "the window starts in the past")
    if ends_at > now + RESERVATION_HORIZON:
        raise invalid("ends_at", f"the window ends beyond {RESERVATION_HORIZON.days} days from now")
    spec = WorkloadSpec(name="reservation", gpu_models=(gpu_model,), region=region)
    check_shape(spec)
    cluster = cluster_for(spec)
    check_standing(organization=organization, project=project, gpu_models=(gpu_model,))
    reservation_id = uuid.uuid4()
    with transaction.atomic():
        # One reservation at a time: the checks below must not race. Under the log's lock,
        # not the organization's or the cluster's rows: an order appends before it reserves,
        # and no row is locked after the log's lock (core.transactions).
        store.take_append_lock()
        ours = list(
            reservations_overlapping(starts_at, ends_at).filter(organization_id=organization.pk)
        )
        same_model = [r for r in ours if r.gpu_model == gpu_model]
        check_approval(gpus, "gpus", order_id, reserved=_at_once(same_model, starts_at, ends_at))
        _check_reserved_at_once(organization, ours, gpus, starts_at, ends_at)
        _check_reserved_quota(project, gpu_model, gpus, starts_at, ends_at)
        fleet = (
            nodes_with_capacity()
            .filter(cluster=cluster, gpu_model_id=gpu_model)
            .aggregate(gpus=Count("gpus"))["gpus"]
        )
        overlapping = reservations_overlapping(starts_at, ends_at).filter(
            cluster_id=cluster.pk, gpu_model=gpu_model
        )
        held = sum(r.gpus for r in overlapping)
        if held + gpus > fleet:
            raise ReservationConflict(
                f"cluster {cluster.slug} has {fleet} {gpu_model}; {held} are reserved in"
                f" that window, {gpus} more do not fit",
                details={"fleet": fleet, "reserved": held},
            )
        store.append(
            ev.RESERVATION_STREAM,
            str(reservation_id),
            [
                ev.ReservationCreated(
                    reservation_id=reservation_id,
                    organization_id=organization.pk,
                    project_id=project.pk,
                    cluster_id=cluster.pk,
                    gpu_model=gpu_model,
                    gpus=gpus,
                    starts_at=starts_at,
                    ends_at=ends_at,
                    offering=offering,
                    order_id=order_id,
                )
            ],
            expected_version=NO_STREAM,
            metadata=actor.metadata(organization.pk),
        )
        triggers.cycle_wanted(cluster.pk)
    return Reservation.objects.get(pk=reservation_id)


def _at_once(reservations: Iterable[Reservation], starts_at: datetime, ends_at: datetime) -> int:
    """The most GPUs ``reservations`` hold at one instant of ``[starts_at, ends_at)``."""
    changes: list[tuple[datetime, int]] = []
    for r in reservations:
        changes += [(max(r.starts_at, starts_at), r.gpus), (min(r.ends_at, ends_at), -r.gpus)]
    most = held = 0
    for _, change in sorted(changes):  # at one instant, what ends goes before what starts
        held += change
        most = max(most, held)
    return most


def _check_reserved_at_once(
    organization: Organization,
    held: Iterable[Reservation],
    gpus: int,
    starts_at: datetime,
    ends_at: datetime,
) -> None:
    """Reserved GPUs are capacity nobody else may use, paid for or not: an organization holds
    at most ``RESERVED_GPUS_PER_ORGANIZATION`` of them at once, all models together."""
    limit = settings.RESERVED_GPUS_PER_ORGANIZATION
    reserved = _at_once(held, starts_at, ends_at)
    if reserved + gpus <= limit:
        return
    message = (
        f"organization {organization.slug} holds {reserved} GPUs reserved at once in that"
        f" window, of at most {limit}: {gpus} more would pass it"
    )
    raise TooMuchReserved(
        message,
        fields={"gpus": [message]},
        details={"reserved": reserved, "limit": limit, "adding": gpus},
    )


def _check_reserved_quota(
    project: Project, gpu_model: str, gpus: int, starts_at: datetime, ends_at: datetime
) -> None:
    """The reservations overlapping the window and this one stay within the project's quota
    (its own reservations) and the organization's (all its projects'); both bind."""
    overlapping = reservations_overlapping(starts_at, ends_at).filter(
        organization_id=project.organization_id, gpu_model=gpu_model
    )
    quotas = Quota.objects.filter(
        Q(project__isnull=True) | Q(project=project),
        organization_id=project.organization_id,
        gpu_model=gpu_model,
    ).select_related("organization", "project")
    for quota in quotas.order_by(F("project").asc(nulls_last=True)):
        held_in = overlapping.filter(project=project) if quota.project else overlapping
        held = held_in.aggregate(total=Sum("gpus"))["total"] or 0
        if held + gpus <= quota.max_gpus:
            continue
        scope = (
            f"project {quota.project.slug}"
            if quota.project
            else f"organization {quota.organization.slug}"
        )
        message = (
            f"{scope} may hold {quota.max_gpus} {gpu_model}; {held} are reserved in that"
            f" window, {gpus} more do not fit"
        )
        raise QuotaExceeded(
            message, fields={"gpus": [message]}, details={"quota": quota.max_gpus, "reserved": held}
        )


def cancellation_charged(reservation: Reservation, now: datetime) -> bool:
    """Whether cancelling ``reservation`` at ``now`` leaves its whole window billed: inside
    the notice period before its start (``RESERVATION_CANCELLATION_NOTICE_S``) or after it.
    Earlier, the capacity can still be sold to someone else, and it costs nothing."""
    notice = timedelta(seconds=settings.RESERVATION_CANCELLATION_NOTICE_S)
    return now > reservation.starts_at - notice


def reservation_cancel(*, actor: Actor, reservation: Reservation, reason: str = "") -> Reservation:
    """Give the GPUs back; the window stays billed when cancelled late
    (``cancellation_charged``), as the cancelled reservation's ``cancellation_charged`` says;
    whoever follows the reservation (its order) is told on commit."""
    organization = Organization.objects.get(pk=reservation.organization_id)
    actor.require(Action.WORKLOAD_WRITE, organization, starting=False)  # suspended too
    reason = reason or f"cancelled by {actor.label}"
    with transaction.atomic():
        reservation = row_lock(Reservation.objects.all()).get(pk=reservation.pk)
        if reservation.status == ReservationStatus.CANCELLED:
            return reservation
        store.append(
            ev.RESERVATION_STREAM,
            str(reservation.pk),
            [
                ev.ReservationCancelled(
                    reason=reason, charged=cancellation_charged(reservation, timezone.now())
                )
            ],
            expected_version=reservation.version,
            metadata=actor.metadata(organization.pk),
        )
        triggers.cycle_wanted(reservation.cluster_id)
        cancelled = Reservation.objects.get(pk=reservation.pk)
        hooks.reservation_ended.on_commit(cancelled, f"reservation cancelled: {reason}")
    return cancelled
