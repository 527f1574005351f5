"""``/api/v1/workloads/{id}/web-endpoints``: a workload's web ports, their URLs, and tokens
for programs to reach them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway import selectors, services
from gateway import serializers as s
from neocloud.core.transactions import atomic_with_retry
from scheduler.models import Workload
from tenants.access import Action
from tenants.actor import actor_for


def _workload(request: Request, pk: str) -> Workload:
    """Scoped like the workload: another tenant's (or project's) is a 404."""
    visible = actor_for(request).scope(Workload.objects.all(), Action.WORKLOAD_READ)
    return get_object_or_404(visible, pk=pk)


class WebEndpointsView(APIView):
    """The workload's web ports (``http_ports``): each one's URL and whether it answers now
    (its run is running and its agent reported the port)."""

    @extend_schema(responses=s.WebEndpointSerializer(many=True))
    def get(self, request: Request, pk: str) -> Response:
        workload = _workload(request, pk)
        live = {e.port for e in selectors.endpoints_of(workload)}
        shown = [
            {"port": port, "url": selectors.endpoint_url(workload.pk, port), "live": port in live}
            for port in workload.http_ports
        ]
        return Response(s.WebEndpointSerializer(shown, many=True).data)


class EndpointTokensView(APIView):
    """A token for programs: ``Authorization: Bearer <token>`` (or ``?token=`` once, which
    sets a cookie) on the web port's URL. Shown once; only its hash is kept."""

    @extend_schema(
        request=s.EndpointTokenCreateSerializer, responses={201: s.EndpointTokenSerializer}
    )
    def post(self, request: Request, pk: str) -> Response:
        workload = _workload(request, pk)
        body = s.EndpointTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, secret = atomic_with_retry(
            services.endpoint_token_create,
            actor=actor_for(request),
            workload=workload,
            port=body.validated_data["port"],
            name=body.validated_data["name"],
        )
        shown = {
            "id": token.pk,
            "port": token.port,
            "name": token.name,
            "prefix": token.prefix,
            "token": secret,
            "url": selectors.endpoint_url(workload.pk, token.port),
            "created_at": token.created_at,
        }
        return Response(s.EndpointTokenSerializer(shown).data, status=201)
