"""Order endpoints. Views validate, call one service, and render."""

from __future__ import annotations

from django_filters.filterset import filterset_factory
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from neocloud.api.idempotency import idempotent
from orders import serializers as s
from orders import services
from orders.models import Order
from tenants.access import Action
from tenants.viewsets import TenantViewSet


class OrderViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Orders of the projects the caller sees, each with its steps (status, actor, reason)."""

    queryset = Order.objects.prefetch_related("steps")
    serializer_class = s.OrderSerializer
    read_action = Action.ORDER_READ
    filterset_class = filterset_factory(
        Order, fields=["organization", "project", "status", "offering", "region"]
    )
    ordering_fields = ["created_at", "updated_at"]

    @extend_schema(request=s.OrderCreateSerializer, responses={201: s.OrderSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        """Order from the catalog. Small orders come back fulfilled (with their workload or
        reservation); orders over the approval threshold come back validated and wait for an
        operator. A refusal (catalog, suspension, quota, payment) writes nothing."""
        data = self.validated(s.OrderCreateSerializer, request.data)
        order = self.perform(
            services.order_submit,
            project=data.pop("project"),
            offering=data.pop("offering"),
            region=data.pop("region"),
            price_plan=data.pop("price_plan"),
            request=services.OrderRequest(**data),
        )
        return Response(s.OrderSerializer(order).data, status=201)

    @extend_schema(request=s.OrderCancelSerializer, responses=s.OrderSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Withdraw an order before it is fulfilled (409 `invalid_transition` after)."""
        data = self.validated(s.OrderCancelSerializer, request.data)
        order = self.perform(services.order_cancel, order=self.get_object(), **data)
        return Response(s.OrderSerializer(order).data)
