"""Volume bodies and views."""

from __future__ import annotations

from rest_framework import serializers

from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import (
    StrictChoiceField,
    StrictIntegerField,
    StrictPrimaryKeyRelatedField,
    StrictSlugField,
)
from storage.models import Volume, VolumeType
from storage.services import MAX_VOLUME_GB
from tenants.models import Project


class VolumeSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Volume
        fields = [
            "id",
            "organization",
            "project",
            "cluster",
            "name",
            "type",
            "size_gb",
            "node_id",
            "used_bytes",
            "status",
            "created_at",
            "deleted_at",
        ]
        read_only_fields = fields


class VolumeCreateSerializer(RequestSerializer):
    project = StrictPrimaryKeyRelatedField(queryset=Project.objects.all())
    name = StrictSlugField(max_length=64)
    size_gb = StrictIntegerField(min_value=1, max_value=MAX_VOLUME_GB, help_text="provisioned GB")
    cluster = StrictSlugField(max_length=64, help_text="the cluster's slug")
    type = StrictChoiceField(choices=VolumeType.choices, default=VolumeType.LOCAL)
