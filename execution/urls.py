"""Execution routes: beside the fleet's ``nodes/{id}/…`` and the scheduler's
``workloads/{id}/…`` (neither router has these actions, so none shadows the other). The
node's id is ``pk``: ``NodeTokenAuthentication`` reads it from there."""

from django.urls import URLPattern, path

from execution import api

workload = api.WorkloadExecutionViewSet

urlpatterns: list[URLPattern] = [
    path(
        "nodes/<str:pk>/assignments",
        api.NodeAssignmentsView.as_view(),
        name="node-assignments",
    ),
    path("nodes/<str:pk>/reports", api.NodeReportsView.as_view(), name="node-reports"),
    path("nodes/<str:pk>/logs", api.NodeLogsView.as_view(), name="node-logs"),
    path("workloads/<uuid:pk>/logs", workload.as_view({"get": "logs"}), name="workload-logs"),
    path(
        "workloads/<uuid:pk>/assignments",
        workload.as_view({"get": "assignments"}),
        name="workload-assignments",
    ),
]
