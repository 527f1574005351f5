"""Queues and quotas, and reservations (create and cancel through the API's services)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_POST

from console.forms.capacity import ReservationForm
from console.guard import Console, ConsoleRequest, signed_in
from console.selectors import capacity as selectors
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from scheduler import services
from scheduler.models import Reservation
from tenants.access import Action
from tenants.models import Project


def _readable(console: Console) -> None:
    if not console.can(Action.WORKLOAD_READ):
        raise PermissionDenied


@signed_in
def queues(request: ConsoleRequest) -> HttpResponse:
    _readable(request.console)
    found = selectors.project_queues(request.console, timezone.now())
    return render(request, "console/capacity/queues.html", {"queues": found})


def _form(console: Console, data: object = None) -> ReservationForm:
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    return ReservationForm(
        data,
        projects=console.scoped(Project.objects.all(), Action.PROJECT_READ),
        initial={
            "gpus": 1,
            "starts_at": now + timedelta(hours=1),
            "ends_at": now + timedelta(days=1),
        },
    )


def _page(
    request: ConsoleRequest,
    form: ReservationForm | None = None,
    status: int = 200,
    error: str = "",
) -> HttpResponse:
    console = request.console
    can_write = console.can(Action.WORKLOAD_WRITE)
    context = {
        "reservations": selectors.reservations(console, timezone.now()),
        "can_write": can_write,
        "form": (form or _form(console)) if can_write else None,
        "error": error,
    }
    return render(request, "console/capacity/reservations.html", context, status=status)


@signed_in
def reservations(request: ConsoleRequest) -> HttpResponse:
    _readable(request.console)
    return _page(request)


@require_POST
@signed_in
def reservation_create(request: ConsoleRequest) -> HttpResponse:
    """``reservation_create``, as ``POST /api/v1/reservations`` calls it; the service decides
    who may (a viewer's forged form is refused there)."""
    _readable(request.console)
    form = _form(request.console, request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    try:
        reservation = atomic_with_retry(
            services.reservation_create, actor=request.console.actor, **form.service_arguments()
        )
    except ApplicationError as error:
        form.refused(error)
        return _page(request, form, status=error.http_status, error=error.message)
    held = f"{reservation.gpus} {reservation.gpu_model}"
    messages.success(request, f"Reserved {held} GPUs for {reservation.project.name}.")
    return redirect("console:reservations")


@require_POST
@signed_in
def reservation_cancel(request: ConsoleRequest, pk: str) -> HttpResponse:
    """``reservation_cancel`` with no reason, as ``POST /api/v1/reservations/{id}/cancel``
    with an empty body; another organization's reservation is a 404."""
    _readable(request.console)
    reservation = request.console.one(Reservation.objects.all(), Action.WORKLOAD_READ, pk)
    try:
        cancelled = atomic_with_retry(
            services.reservation_cancel,
            actor=request.console.actor,
            reservation=reservation,
            reason="",
        )
    except ApplicationError as error:
        return _page(request, status=error.http_status, error=error.message)
    if cancelled.cancellation_charged:
        cost = (
            "; its whole window is still billed (cancelled within the notice period before"
            " its start, or after it)"
        )
    else:
        cost = " at no charge"
    messages.success(request, f"Reservation cancelled{cost}.")
    return redirect("console:reservations")


urlpatterns: list[URLPattern] = [
    path("queues", queues, name="queues"),
    path("reservations", reservations, name="reservations"),
    path("reservations/new", reservation_create, name="reservation-create"),
    path("reservations/<str:pk>/cancel", reservation_cancel, name="reservation-cancel"),
]
