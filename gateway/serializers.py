from __future__ import annotations

from rest_framework import serializers

from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import StrictCharField, StrictIntegerField


class WebEndpointSerializer(serializers.Serializer):  # type: ignore[type-arg]
    port = serializers.IntegerField()
    url = serializers.CharField(allow_null=True, help_text="null: no gateway is configured")
    live = serializers.BooleanField(help_text="its run is running and reported the port")


class EndpointTokenCreateSerializer(RequestSerializer):
    port = StrictIntegerField(min_value=1, max_value=65535, help_text="a web port")
    name = StrictCharField(max_length=128, required=False, default="", allow_blank=True)


class EndpointTokenSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField()
    port = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    token = serializers.CharField(help_text="shown this once; only its hash is kept")
    url = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
