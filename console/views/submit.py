"""New workload: from an offering or custom, with the engine's say before submitting.

The page posts a form; it becomes the API's request (``forms.submit``), is validated by the
API's serializer with the project scoped as the API scopes it, and goes to the API's own
services: ``workload_dry_run`` for "Check" and ``workload_estimate`` for "When would it
start?" (each a partial for htmx, the page without it), and ``workload_submit`` for
"Submit" (``workload_submit_array`` when copies are asked, the task at index 0's page
opening). Refusals show beside their inputs, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_http_methods, require_POST

from console.forms.submit import WorkloadForm
from console.guard import ConsoleRequest, signed_in
from console.selectors.submit import as_asked_words, estimate_rows, form_choices, reason_words
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from scheduler import services
from scheduler.serializers import WorkloadCreateSerializer, workload_spec_of
from scheduler.specs import WorkloadSpec
from tenants.access import Action
from tenants.models import Project

T = TypeVar("T")
PAGE = "console/submit/new.html"
FORM = "console/submit/_form.html"


def _writer(request: ConsoleRequest) -> None:
    if not request.console.can(Action.WORKLOAD_WRITE):
        raise PermissionDenied


def _parsed(request: ConsoleRequest, form: WorkloadForm) -> tuple[Project, WorkloadSpec] | None:
    """The project and spec the form asks for, as the API would read them; None (the errors
    on the form) when it would refuse them."""
    if not form.is_valid():
        return None
    data = form.request_data()
    serializer = WorkloadCreateSerializer(data=data)
    project_field: Any = serializer.fields["project"]
    project_field.queryset = request.console.scoped(Project.objects.all(), Action.PROJECT_READ)
    if not serializer.is_valid():
        form.refused(serializer.errors)
        return None
    validated = dict(serializer.validated_data)
    project = validated.pop("project")
    try:
        return project, workload_spec_of(validated, data)
    except ApplicationError as error:
        form.refused_by(error)
        return None


def _form(request: ConsoleRequest) -> WorkloadForm:
    choices = form_choices(request.console)
    if request.method == "POST":
        return WorkloadForm(request.POST, choices=choices)
    return WorkloadForm(choices=choices)


def _partial(request: ConsoleRequest) -> bool:
    """Whether htmx asked (``django_htmx``'s middleware tells)."""
    return bool(getattr(request, "htmx", False))


def _render(
    request: ConsoleRequest, form: WorkloadForm, status: int = 200, **context: Any
) -> HttpResponse:
    template = FORM if _partial(request) else PAGE
    return render(request, template, {"form": form, **context}, status=status)


@require_http_methods(["GET", "POST"])
@signed_in
def workload_new(request: ConsoleRequest) -> HttpResponse:
    """The form; posted, the workload is submitted and its page opens."""
    _writer(request)
    form = _form(request)
    if request.method == "GET":
        return _render(request, form)
    parsed = _parsed(request, form)
    if parsed is None:
        return _render(request, form, status=400)
    project, spec = parsed
    count = form.array_count()
    try:
        if count is None:
            workload = atomic_with_retry(
                services.workload_submit, actor=request.console.actor, project=project, spec=spec
            )
            first, submitted = workload.pk, f"Submitted {workload.name}."
        else:
            batch = atomic_with_retry(
                services.workload_submit_array,
                actor=request.console.actor,
                project=project,
                spec=spec,
                count=count,
            )
            first, submitted = (
                batch.workloads[0].workload_id,
                f"Submitted {count} copies of {spec.name}.",
            )
    except ApplicationError as error:
        form.refused_by(error)
        return _render(request, form, status=error.http_status)
    messages.success(request, submitted)
    return redirect(f"/workloads/{first}")


def _ask(
    request: ConsoleRequest,
    service: Callable[..., T],
    shown: Callable[[T], dict[str, Any]],
    asked: str,
) -> HttpResponse:
    """``service`` on what the form asks for, written nothing, and the form again with
    ``shown(answer)`` (``asked`` set True in the context). For htmx the form (200 even when
    the input is refused: the answer is the errors); without it the page (400 when refused)."""
    _writer(request)
    form = _form(request)
    parsed = _parsed(request, form)
    if parsed is None:
        return _render(request, form, status=200 if _partial(request) else 400, **{asked: True})
    project, spec = parsed
    try:
        answer = atomic_with_retry(service, actor=request.console.actor, project=project, spec=spec)
    except ApplicationError as error:
        form.refused_by(error)
        status = 200 if _partial(request) else error.http_status
        return _render(request, form, status=status, **{asked: True})
    return _render(request, form, **{asked: True}, **shown(answer))


def _checked(answer: services.DryRun) -> dict[str, Any]:
    headline, figures = reason_words(answer.reason) if answer.reason else ("", [])
    return {"answer": answer, "headline": headline, "figures": figures}


def _estimated(answer: services.WorkloadEstimates) -> dict[str, Any]:
    return {
        "estimates": estimate_rows(answer.models),
        "as_asked": as_asked_words(answer.as_asked),
        "summary": services.estimates_in_words(answer),
    }


@require_POST
@signed_in
def workload_check(request: ConsoleRequest) -> HttpResponse:
    """Whether the engine would place what the form asks for now, and if not why."""
    return _ask(request, services.workload_dry_run, _checked, "checked")


@require_POST
@signed_in
def workload_estimate(request: ConsoleRequest) -> HttpResponse:
    """When what the form asks for would start, per acceptable GPU model, and at what price
    an hour."""
    return _ask(request, services.workload_estimate, _estimated, "estimated")


urlpatterns: list[URLPattern] = [
    path("workloads/new", workload_new, name="workload-new"),
    path("workloads/new/check", workload_check, name="workload-check"),
    path("workloads/new/estimate", workload_estimate, name="workload-estimate"),
]
