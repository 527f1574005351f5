"""Execution routes: beside the fleet's ``nodes/{id}/…`` and the scheduler's
``workloads/{id}/…`` (neither router has these actions, so none shadows the other). The
node's id is ``pk``: ``NodeTokenAuthentication`` reads it from there. The two long polls are
async (``execution.longpoll``): waiting, they hold no worker."""

from django.urls import URLPattern, path

from execution import api
from execution.longpoll import async_view

workload = api.WorkloadExecutionViewSet

urlpatterns: list[URLPattern] = [
    path(
        "nodes/<str:pk>/assignments",
        async_view(api.NodeAssignmentsView.as_view()),
        name="node-assignments",
    ),
    path("nodes/<str:pk>/reports", api.NodeReportsView.as_view(), name="node-reports"),
    path("nodes/<str:pk>/logs", api.NodeLogsView.as_view(), name="node-logs"),
    path(
        "workloads/<uuid:pk>/logs",
        async_view(workload.as_view({"get": "logs"})),
        name="workload-logs",
    ),
    path(
        "workloads/<uuid:pk>/assignments",
        workload.as_view({"get": "assignments"}),
        name="workload-assignments",
    ),
]
