"""Start a GPU dev environment (issue 32): the form posts a workload of kind ``dev``, read by
the API's serializer with the project scoped as the API scopes it, and submitted through
``workload_submit``; its page (with the ``ssh`` command once it runs) opens."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_http_methods

from console.forms.dev import DevForm
from console.guard import ConsoleRequest, signed_in
from console.selectors.submit import form_choices
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from scheduler import services
from scheduler.serializers import WorkloadCreateSerializer, workload_spec_of
from tenants.access import Action
from tenants.models import Project

PAGE = "console/submit/dev.html"


@require_http_methods(["GET", "POST"])
@signed_in
def dev_new(request: ConsoleRequest) -> HttpResponse:
    if not request.console.can(Action.WORKLOAD_WRITE):
        raise PermissionDenied
    choices = form_choices(request.console)
    if request.method == "GET":
        return render(request, PAGE, {"form": DevForm(choices=choices)})
    form = DevForm(request.POST, choices=choices)
    if not form.is_valid():
        return render(request, PAGE, {"form": form}, status=400)
    data = form.request_data()
    serializer = WorkloadCreateSerializer(data=data)
    project_field: Any = serializer.fields["project"]
    project_field.queryset = request.console.scoped(Project.objects.all(), Action.PROJECT_READ)
    if not serializer.is_valid():
        form.add_error(None, "; ".join(f"{k}: {v}" for k, v in serializer.errors.items()))
        return render(request, PAGE, {"form": form}, status=400)
    validated = dict(serializer.validated_data)
    project = validated.pop("project")
    try:
        spec = workload_spec_of(validated, data)
        workload = atomic_with_retry(
            services.workload_submit, actor=request.console.actor, project=project, spec=spec
        )
    except ApplicationError as error:
        form.add_error(None, error.message)
        return render(request, PAGE, {"form": form}, status=error.http_status)
    messages.success(request, f"Started the dev environment {workload.name}.")
    return redirect(f"/workloads/{workload.pk}")


urlpatterns: list[URLPattern] = [path("workloads/new-dev", dev_new, name="dev-new")]
