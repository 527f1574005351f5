"""Workloads: the list with its filters, a workload's page (status timeline, placement, why
it waits, queue position, logs, cancel).

The page's live parts are the same view rendering a fragment: ``?partial=status`` (status,
reason, timeline, placement, assignments; polled every 2 s while the workload is not final)
and ``?partial=logs&cursor=N`` (the output past ``N``, appended by the page)."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from console.forms.positions import check_position
from console.forms.workloads import WorkloadFilterForm
from console.guard import ConsoleRequest, signed_in
from console.selectors import workloads as selectors
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from scheduler import services
from scheduler.models import Workload
from scheduler.selectors import ssh_commands
from tenants.access import Action


@require_GET
@signed_in
def workload_list(request: ConsoleRequest) -> HttpResponse:
    console = request.console
    projects, gpu_models = selectors.filter_choices(console)
    form = WorkloadFilterForm(request.GET or None, projects=projects, gpu_models=gpu_models)
    if form.is_bound and not form.is_valid():
        refused = {"form": form, "page": None, "can_submit": console.can(Action.WORKLOAD_WRITE)}
        return render(request, "console/workloads/list.html", refused, status=400)
    filters = form.filters() if form.is_bound else selectors.Filters()
    page = selectors.workload_page(console, filters, request.GET.get("page"))
    starts = selectors.starts_shown(page.object_list, timezone.now())
    rows = [(w, selectors.gpus_asked(w), starts.get(w.pk)) for w in page.object_list]
    context: dict[str, object] = {
        "form": form,
        "page": page,
        "rows": rows,
        "can_submit": console.can(Action.WORKLOAD_WRITE),
    }
    return render(request, "console/workloads/list.html", context)


@require_GET
@signed_in
def workload_detail(request: ConsoleRequest, workload_id: uuid.UUID) -> HttpResponse:
    workload = _workload(request, workload_id)
    partial = request.GET.get("partial", "")
    if partial == "logs":
        cursor = check_position(request.GET.get("cursor", "0"))
        if cursor is None:
            return HttpResponseBadRequest("cursor: not a position")
        logs = selectors.workload_logs(workload, cursor)
        return render(request, "console/workloads/_logs.html", {"workload": workload, "logs": logs})
    context = _context(request, workload)
    if partial == "status":
        return render(request, "console/workloads/_status.html", context)
    context["logs"] = selectors.workload_logs(workload)
    return render(request, "console/workloads/detail.html", context)


@require_POST
@signed_in
def workload_cancel(request: ConsoleRequest, workload_id: uuid.UUID) -> HttpResponse:
    """Cancel through the API's service: it checks the role again (a forged POST by a viewer
    is refused there) and a workload already cancelled stays so."""
    workload = _workload(request, workload_id)
    try:
        atomic_with_retry(
            services.workload_cancel, actor=request.console.actor, workload=workload, reason=""
        )
    except ApplicationError as error:
        context = _context(request, Workload.objects.get(pk=workload.pk))
        context.update(error=error.message, logs=selectors.workload_logs(workload))
        return render(request, "console/workloads/detail.html", context, status=error.http_status)
    messages.success(request, f"Workload {workload.name} cancelled.")
    return redirect("console:workload", workload_id=workload.pk)


def _workload(request: ConsoleRequest, workload_id: uuid.UUID) -> Workload:
    """The workload if the member may read it, in any of their organizations; else a 404."""
    return request.console.one(
        Workload.objects.select_related("project", "organization"),
        Action.WORKLOAD_READ,
        workload_id,
    )


def _context(request: ConsoleRequest, workload: Workload) -> dict[str, object]:
    detail = selectors.workload_detail(workload)
    # Its own organization's rule: the page may be of another than the current one.
    may_cancel = request.console.actor.allowed(Action.WORKLOAD_WRITE, workload.organization)
    return {
        "workload": workload,
        "detail": detail,
        "asked": selectors.gpus_asked(workload),
        "can_cancel": may_cancel and not detail.final,
        "ssh_commands": ssh_commands(workload),  # issue 32
    }


urlpatterns: list[URLPattern] = [
    path("workloads", workload_list, name="workloads"),
    # A uuid only, so that the submit page's ``workloads/new`` is not taken for one.
    path("workloads/<uuid:workload_id>", workload_detail, name="workload"),
    path("workloads/<uuid:workload_id>/cancel", workload_cancel, name="workload-cancel"),
]
