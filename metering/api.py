"""Usage reports (JSON, CSV, a daily series) and budgets. Reads are scoped by
``Actor.scope`` with ``Action.ORDER_READ`` (owners, admins, members, viewers and billing);
budgets are set by owners and admins."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any, cast

from django.utils import timezone
from django_filters import FilterSet, UUIDFilter
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from metering import selectors, services
from metering import serializers as s
from metering.models import Budget
from neocloud.api.bodies import query_names, refuse_unknown
from neocloud.api.idempotency import idempotent
from neocloud.api.pagination import Cursor
from neocloud.api.schema import ErrorSerializer
from neocloud.core.spreadsheets import csv_cell
from tenants.access import Action
from tenants.actor import actor_for
from tenants.viewsets import TenantViewSet

QUERY_PARAMETERS = [
    OpenApiParameter("from", str, description="ISO 8601; default: the current UTC month"),
    OpenApiParameter("to", str, description="ISO 8601, exclusive; default: next month"),
    OpenApiParameter("organization", str, description="UUID: one organization only"),
    OpenApiParameter("project", str, description="UUID: one project only"),
]
# What the usage views read; anything else is a misspelling (``neocloud.api.bodies``).
USAGE_PARAMETERS = query_names(*(parameter.name for parameter in QUERY_PARAMETERS))
GROUP_BY = OpenApiParameter(
    "group_by", str, description=f"comma-separated, any of: {', '.join(selectors.DIMENSIONS)}"
)


class UsageCsvRenderer(BaseRenderer):
    """A usage report as CSV: the dimensions grouped by, then the figures."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        if "error" in data:  # errors keep their code and message
            writer.writerow(["code", "message"])
            writer.writerow([csv_cell(data["error"]["code"]), csv_cell(data["error"]["message"])])
        else:
            columns = [*data["group_by"], "gpu_seconds", "milli_gpu_seconds"]
            writer.writerow(columns)
            for row in data["results"]:
                writer.writerow(["" if row[c] is None else csv_cell(row[c]) for c in columns])
        return out.getvalue().encode()


class UsageView(APIView):
    """GPU usage per group over a window: closed usage and open allocations up to now."""

    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, UsageCsvRenderer]

    @extend_schema(
        parameters=[GROUP_BY, *QUERY_PARAMETERS],
        responses={200: s.UsageReportSerializer, 400: ErrorSerializer},
    )
    def get(self, request: Request, format: str | None = None) -> Response:
        now = timezone.now()
        refuse_unknown(request.query_params, USAGE_PARAMETERS | {GROUP_BY.name})
        query = selectors.check_usage_query(request.query_params, now=now)
        slices, open_allocations = selectors.usage_visible_to(actor_for(request))
        rows = selectors.usage_rows(
            slices=slices, open_allocations=open_allocations, query=query, now=now
        )
        response = Response(
            {"from": query.start, "to": query.end, "group_by": query.group_by, "results": rows}
        )
        if format == "csv" or request.query_params.get("format") == "csv":
            response["Content-Disposition"] = 'attachment; filename="usage.csv"'
        return response


class UsageDailyView(APIView):
    """Usage per UTC day of the window (every day, zero included): a chart's series."""

    @extend_schema(
        parameters=QUERY_PARAMETERS, responses={200: s.UsageDailySerializer, 400: ErrorSerializer}
    )
    def get(self, request: Request) -> Response:
        now = timezone.now()
        refuse_unknown(request.query_params, USAGE_PARAMETERS)
        query = selectors.check_usage_query(request.query_params, now=now, group_by_allowed=False)
        slices, open_allocations = selectors.usage_visible_to(actor_for(request))
        days = selectors.usage_daily(
            slices=slices, open_allocations=open_allocations, query=query, now=now
        )
        return Response({"from": query.start, "to": query.end, "days": days})


class BudgetFilter(FilterSet):  # type: ignore[misc]
    organization = UUIDFilter(field_name="organization_id")
    project = UUIDFilter(field_name="project_id")


class BudgetCursor(Cursor):
    ordering = "id"


class BudgetViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TenantViewSet
):
    """Monthly GPU-hour budgets of organizations and projects, with this month's usage."""

    queryset = Budget.objects.all()
    serializer_class = s.BudgetSerializer
    read_action = Action.ORDER_READ
    filterset_class = BudgetFilter
    pagination_class = BudgetCursor

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # A page always: ``pagination_class`` is set.
        page = cast(
            "list[Budget]", self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        )
        return self.get_paginated_response(_shown(page))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(_shown([self.get_object()])[0])

    @extend_schema(request=s.BudgetSetSerializer, responses={201: s.BudgetSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        """Set the budget of an organization, or of a project with ``project``: setting it
        again replaces it."""
        data = self.validated(s.BudgetSetSerializer, request.data)
        budget = self.perform(services.budget_set, **data)
        return Response(_shown([budget])[0], 201)

    def perform_destroy(self, instance: Budget) -> None:
        self.perform(services.budget_clear, budget=instance)


def _shown(budgets: list[Budget]) -> list[dict[str, Any]]:
    """Budgets as the API shows them, this month's usage read for all of them at once."""
    context = {"month_usage": selectors.budgets_month_usage(budgets, timezone.now())}
    return list(s.BudgetSerializer(budgets, many=True, context=context).data)
