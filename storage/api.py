"""Volumes of a project (docs/user-guide/volumes.md)."""

from __future__ import annotations

from django_filters.filterset import filterset_factory
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from neocloud.api.idempotency import idempotent
from storage import serializers as s
from storage import services
from storage.models import Volume
from tenants.access import Action
from tenants.viewsets import TenantViewSet


class VolumeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Directories that outlive runs: workloads mount them (``volumes`` of a workload)."""

    queryset = Volume.objects.all()
    serializer_class = s.VolumeSerializer
    read_action = Action.WORKLOAD_READ
    filterset_class = filterset_factory(
        Volume, fields=["organization", "project", "status", "type", "name"]
    )
    ordering_fields = ["name", "created_at"]

    @extend_schema(request=s.VolumeCreateSerializer, responses={201: s.VolumeSerializer})
    @idempotent()
    def create(self, request: Request) -> Response:
        data = self.validated(s.VolumeCreateSerializer, request.data)
        volume = self.perform(services.volume_create, **data)
        return Response(s.VolumeSerializer(volume).data, status=201)

    def destroy(self, request: Request, pk: str) -> Response:
        """Refused (409 ``volume_in_use``) while a workload not yet finished mounts it."""
        self.perform(services.volume_delete, volume=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
