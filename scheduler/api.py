"""Workloads, reservations and queues for customers; the scheduler's view of capacity for
operators. Writes go to ``services``; reads are scoped by ``Actor.scope``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from django_filters.filterset import filterset_factory
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from events.serializers import AuditEventSerializer
from inventory.models import Cluster
from neocloud.api.bodies import query_names, refuse_unknown
from neocloud.api.idempotency import idempotent
from neocloud.api.pagination import Cursor
from neocloud.core.transactions import atomic_with_retry
from scheduler import batch_serializers as sb
from scheduler import selectors, services
from scheduler import serializers as s
from scheduler import what_if_serializers as wi
from scheduler.models import Reservation, Workload
from tenants.access import Action
from tenants.actor import actor_for
from tenants.models import Project
from tenants.permissions import IsOperator
from tenants.viewsets import TenantViewSet


class WorkloadCursor(Cursor):
    ordering = "-submitted_at"


def _dry_run(request: Request) -> bool:
    query = s.WorkloadCreateQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return bool(query.validated_data["dry_run"])


class WorkloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Jobs and services: submit, watch (status, exact placement, why it waits), cancel."""

    pagination_class = WorkloadCursor
    queryset = Workload.objects.all()
    serializer_class = s.WorkloadSerializer
    read_action = Action.WORKLOAD_READ
    filterset_class = filterset_factory(
        Workload, fields=["organization", "project", "status", "kind", "cluster_id"]
    )
    ordering_fields = ["submitted_at", "priority", "status"]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # A page always: ``pagination_class`` is set.
        page = cast(
            "list[Workload]", self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        )
        return self.get_paginated_response(_shown(page))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(_shown([self.get_object()])[0])

    @extend_schema(
        request=s.WorkloadCreateSerializer,
        parameters=[s.WorkloadCreateQuerySerializer],
        responses={201: s.WorkloadSerializer, 200: s.DryRunSerializer},
    )
    @idempotent(unless=_dry_run)
    def create(self, request: Request) -> Response:
        """Submit a workload, directly or against a catalog offering (``offering``). With
        ``dry_run=true``: the same checks and errors, then whether the scheduler would place
        it now, and if not why (the ``pending_reason`` it would get); nothing is written."""
        dry_run = _dry_run(request)
        data = self.validated(s.WorkloadCreateSerializer, request.data)
        project: Project = data.pop("project")
        spec = s.workload_spec_of(data, request.data)
        if dry_run:
            answer = self.perform(services.workload_dry_run, project=project, spec=spec)
            return Response(s.DryRunSerializer(answer).data)
        workload = self.perform(services.workload_submit, project=project, spec=spec)
        return Response(_shown([workload])[0], status=201)

    @extend_schema(request=s.WorkloadCreateSerializer, responses=wi.WorkloadEstimateSerializer)
    @action(detail=False, methods=["post"])
    def estimate(self, request: Request) -> Response:
        """What-if, before submitting: a workload's body as ``POST /api/v1/workloads`` takes
        it, the same checks and errors, then for each acceptable GPU model (the body's, else
        every model of the clusters it may go to) and cluster, as if asked for that model
        alone, and for the body as asked (``as_asked``), whether it would start now,
        else its estimated start with a range and what that rests on, or that it never
        could, and its price per hour. Soonest first. Nothing is written."""
        data = self.validated(s.WorkloadCreateSerializer, request.data)
        project: Project = data.pop("project")
        spec = s.workload_spec_of(data, request.data)
        answer = self.perform(services.workload_estimate, project=project, spec=spec)
        return Response(wi.estimate_shown(answer))

    @extend_schema(request=sb.WorkloadBatchSerializer, responses={201: sb.BatchResultSerializer})
    @action(detail=False, methods=["post"])
    @idempotent()
    def batch(self, request: Request) -> Response:
        """Submit many workloads, all or none: a job array (a workload's fields and
        ``array: {"count": N}``; each task sees ``NEOCLOUD_ARRAY_INDEX``) or ``items``, a
        list of workload bodies. A refused item refuses the batch: nothing is written."""
        projects = self.actor.scope(Project.objects.all(), Action.PROJECT_READ)
        data = sb.batch_of(sb.WorkloadBatchSerializer(data=request.data, projects=projects))
        if "array" in data:
            project, spec = sb.array_spec_of(request.data, self.validated)
            batch = self.perform(
                services.workload_submit_array,
                project=project,
                spec=spec,
                count=data["array"]["count"],
            )
        else:
            raw: Any = request.data
            items = sb.items_of(data, raw["items"])
            batch = self.perform(services.workload_submit_batch, items=items)
        return Response(sb.BatchResultSerializer(batch).data, status=201)

    @extend_schema(request=s.WorkloadCancelSerializer, responses=s.WorkloadSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        data = self.validated(s.WorkloadCancelSerializer, request.data)
        workload = self.perform(
            services.workload_cancel, workload=self.get_object(), reason=data["reason"]
        )
        return Response(_shown([workload])[0])

    @extend_schema(responses=AuditEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str) -> Response:
        """The workload's own stream, oldest first: submitted, admitted, placed, ran, ended."""
        stream = selectors.workload_events(self.get_object())
        return Response(AuditEventSerializer(stream, many=True).data)


def _shown(workloads: Iterable[Workload]) -> list[dict[str, Any]]:
    """Workloads as the API shows them, their state beside their rows loaded for all at once."""
    workloads = list(workloads)
    context = {"states": selectors.workload_states(workloads)}
    return list(s.WorkloadSerializer(workloads, many=True, context=context).data)


class ReservationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """GPUs held for a project's queue in a time window."""

    queryset = Reservation.objects.all()
    serializer_class = s.ReservationSerializer
    read_action = Action.WORKLOAD_READ
    filterset_class = filterset_factory(
        Reservation, fields=["organization", "project", "status", "gpu_model"]
    )
    ordering_fields = ["starts_at", "created_at"]

    @extend_schema(request=s.ReservationCreateSerializer, responses={201: s.ReservationSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        data = self.validated(s.ReservationCreateSerializer, request.data)
        reservation = self.perform(services.reservation_create, **data)
        return Response(s.ReservationSerializer(reservation).data, status=201)

    @extend_schema(request=s.WorkloadCancelSerializer, responses=s.ReservationSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        data = self.validated(s.WorkloadCancelSerializer, request.data)
        reservation = self.perform(
            services.reservation_cancel, reservation=self.get_object(), reason=data["reason"]
        )
        return Response(s.ReservationSerializer(reservation).data)


class QueueViewSet(mixins.ListModelMixin, TenantViewSet):
    """Each visible project's queue: depth, running work, and usage against quota."""

    queryset = Project.objects.all()
    serializer_class = s.QueueSerializer
    read_action = Action.PROJECT_READ
    pagination_class = None  # type: ignore[assignment]  # a project has one queue

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queues = selectors.queues_of(self.get_queryset())  # type: ignore[arg-type]
        return Response(s.QueueSerializer(queues, many=True).data)


class CapacityView(APIView):
    """Operators: per cluster and GPU model, GPUs allocated, free, free on nodes that cannot
    take work, and free GPUs too scattered for each typical shape."""

    permission_classes = [IsOperator]

    @extend_schema(responses=s.ClusterAllocationSerializer(many=True))
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, query_names("cluster"))
        figures = selectors.cluster_allocations(request.query_params.get("cluster"))
        return Response(s.ClusterAllocationSerializer(figures, many=True).data)


class ClusterWhatIfView(APIView):
    """Operators: what draining nodes of the cluster, or a new reservation on it, would do to
    its waiting work's start estimates, before doing it. Nothing is written."""

    permission_classes = [IsOperator]

    @extend_schema(request=wi.ClusterWhatIfRequestSerializer, responses=wi.ClusterWhatIfSerializer)
    def post(self, request: Request, pk: str) -> Response:
        """``{"drain": [node ids]}`` (as ``POST /api/v1/nodes/{id}/drain`` would: no new work
        there, what runs stays until it ends), ``{"reservation": {...}}`` (as ``POST
        /api/v1/reservations`` would hold it), or both: the forecast on the live state and
        on the changed one, each waiting workload whose estimate moved, and the totals."""
        cluster = get_object_or_404(Cluster, pk=pk)
        body = wi.ClusterWhatIfRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        asked = body.validated_data.get("reservation")
        answer = atomic_with_retry(
            services.cluster_what_if,
            actor=actor_for(request),
            cluster=cluster,
            drain=body.validated_data["drain"],
            reservation=services.ReservationAsked(**asked) if asked else None,
        )
        return Response(wi.ClusterWhatIfSerializer(answer).data)
