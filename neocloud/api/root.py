"""The API root: what a client can discover without credentials."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

import neocloud


class ApiRootView(APIView):
    """Entry point of ``/api/v1/``: links to the schema and the docs."""

    permission_classes = [AllowAny]

    @extend_schema(
        responses=inline_serializer(
            "ApiRoot",
            fields={
                "name": serializers.CharField(),
                "version": serializers.CharField(help_text="the API's version"),
                "server_version": serializers.CharField(help_text="NeoCloud's release"),
                "schema": serializers.URLField(),
                "docs": serializers.URLField(),
            },
        )
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "name": "NeoCloud",
                "version": "v1",
                "server_version": neocloud.__version__,
                "schema": reverse("api-schema", request=request),
                "docs": reverse("api-docs", request=request),
            }
        )
