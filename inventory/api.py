"""Fleet endpoints: GPU models and regions for everyone signed in; clusters and nodes for
operators; heartbeats for node agents."""

from __future__ import annotations

from typing import Any, cast

from django_filters.filterset import filterset_factory
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.filters import OrderingFilter
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory import selectors, services
from inventory import serializers as s
from inventory.authentication import NodeTokenAuthentication
from inventory.lifecycle import NodeAction
from inventory.models import Cluster, GpuModel, Node, Region
from neocloud.api.pagination import Cursor
from neocloud.api.queries import KnownParameters
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.actor import actor_for
from tenants.permissions import IsOperator


class BySlug(Cursor):
    ordering = "slug"


class GpuModelViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """GPU models of the fleet (what the catalog sells)."""

    queryset = GpuModel.objects.all()
    serializer_class = s.GpuModelSerializer
    pagination_class = BySlug


class RegionViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    queryset = Region.objects.all()
    serializer_class = s.RegionSerializer
    pagination_class = BySlug


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Operators: clusters with their racks, topology and capacity."""

    queryset = Cluster.objects.prefetch_related("racks")
    serializer_class = s.ClusterSerializer
    permission_classes = [IsOperator]
    pagination_class = BySlug

    @extend_schema(
        responses={
            200: OpenApiResponse(description="cluster → spine → rack → node → NVLink domain → GPU")
        }
    )
    @action(detail=True, methods=["get"])
    def topology(self, request: Request, pk: str) -> Response:
        return Response(selectors.cluster_topology(self.get_object()))

    @extend_schema(
        responses={
            200: OpenApiResponse(
                description="GPUs total, healthy and schedulable, per GPU model and node"
            )
        }
    )
    @action(detail=True, methods=["get"])
    def capacity(self, request: Request, pk: str) -> Response:
        return Response(selectors.cluster_capacity(self.get_object()))


def _run(request: Request, service: Any, **kwargs: Any) -> Any:
    return atomic_with_retry(service, actor=actor_for(request), **kwargs)


class NodeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Operators: nodes, their GPUs and provisioning, and the lifecycle actions."""

    queryset = Node.objects.select_related("cluster", "rack").prefetch_related("gpus")
    serializer_class = s.NodeSerializer
    permission_classes = [IsOperator]
    pagination_class = Cursor
    filter_backends = [KnownParameters, OrderingFilter]
    filterset_class = filterset_factory(Node, fields=["cluster", "rack", "state", "gpu_model"])
    ordering_fields = ["name", "created_at", "state_changed_at"]

    def get_serializer_class(self) -> type[s.NodeSerializer]:
        return s.NodeDetailSerializer if self.action == "retrieve" else s.NodeSerializer

    def _act(self, request: Request, action_name: NodeAction) -> Response:
        data = s.NodeActionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        node = self.get_object()
        reason = data.validated_data["reason"]
        if action_name is NodeAction.PROVISION:
            node = _run(request, services.node_provision, node=node)
        elif action_name is NodeAction.DECOMMISSION:
            node = _run(request, services.node_decommission, node=node, reason=reason)
        else:
            node = _run(
                request, services.node_transition, node=node, action=action_name, reason=reason
            )
        return Response(s.NodeDetailSerializer(node).data)

    @extend_schema(request=s.NodeActionSerializer, responses=s.NodeDetailSerializer)
    @action(detail=True, methods=["post"])
    def provision(self, request: Request, pk: str) -> Response:
        """Start a provisioning run (registered, maintenance or failed nodes)."""
        return self._act(request, NodeAction.PROVISION)

    @extend_schema(request=s.NodeActionSerializer, responses=s.NodeDetailSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, pk: str) -> Response:
        """No new placements; running work stays."""
        return self._act(request, NodeAction.CORDON)

    @extend_schema(request=s.NodeActionSerializer, responses=s.NodeDetailSerializer)
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, pk: str) -> Response:
        return self._act(request, NodeAction.UNCORDON)

    @extend_schema(request=s.NodeActionSerializer, responses=s.NodeDetailSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str) -> Response:
        """No new placements; maintenance once the running work is gone."""
        return self._act(request, NodeAction.DRAIN)

    @extend_schema(request=s.NodeActionSerializer, responses=s.NodeDetailSerializer)
    @action(detail=True, methods=["post"])
    def maintenance(self, request: Request, pk: str) -> Response:
        """End a drain now."""
        return self._act(request, NodeAction.MAINTENANCE)

    @extend_schema(request=s.NodeActionSerializer, responses=s.NodeDetailSerializer)
    @action(detail=True, methods=["post"])
    def decommission(self, request: Request, pk: str) -> Response:
        """Retire the node; its resources are torn down by the provisioning workers."""
        return self._act(request, NodeAction.DECOMMISSION)

    @extend_schema(request=None, responses=s.NodeTokenSerializer)
    @action(detail=True, methods=["post"])
    def token(self, request: Request, pk: str) -> Response:
        """A new node-agent token, shown once; the old one stops working."""
        _, token = _run(request, services.node_token_rotate, node=self.get_object())
        return Response({"token": token})


class IsNodeAgent(BasePermission):
    """The request came with a valid node token (else 401 with ``WWW-Authenticate``)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Node)


class NodeHeartbeatView(APIView):
    """Node agents report in with their token (``Authorization: Node <token>``). No throttle:
    a fleet's agents may share one address."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes: list[Any] = []

    @extend_schema(request=s.HeartbeatSerializer, responses=s.HeartbeatAckSerializer)
    def post(self, request: Request, pk: str) -> Response:
        node = cast(Node, request.auth)  # IsNodeAgent made sure
        data = s.HeartbeatSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reports = [services.GpuHealth(**gpu) for gpu in data.validated_data["gpus"]]
        agent = data.validated_data["agent"]
        node = atomic_with_retry(
            services.node_heartbeat,
            actor=Actor.system_actor(f"node:{node.name}"),
            node=node,
            gpus=reports,
            agent=services.AgentInfo(**agent) if agent is not None else None,
            volumes=[(v["id"], v["used_bytes"]) for v in data.validated_data["volumes"]],
        )
        return Response(
            {
                "state": node.state,
                "received_at": node.last_heartbeat_at,
                "accepting_work": node.schedulable and not node.inventory_mismatch,
                "mismatch": node.inventory_mismatch,
            }
        )
