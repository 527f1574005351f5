"""A volume: a project's directory that outlives its runs, on one node's disk (``local``)
or on a cluster's shared filesystem (``shared``). Rows are projections of the volume's
stream (``storage.events``); a deleted volume keeps its row (``deleted_at``) for metering."""

from __future__ import annotations

from django.db import models

from inventory.models import Cluster
from tenants.models import Organization, Project, TenantPath


class VolumeType(models.TextChoices):
    LOCAL = "local"
    SHARED = "shared"


class VolumeStatus(models.TextChoices):
    ACTIVE = "active"
    DELETED = "deleted"


class Volume(models.Model):
    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT)
    name = models.CharField(max_length=64)
    type = models.CharField(max_length=8, choices=VolumeType.choices)
    size_gb = models.PositiveIntegerField()
    # A local volume's node: set by the first run that mounts it; its data lives there.
    node_id = models.UUIDField(null=True, blank=True)
    # What the agent last measured in the volume's directory (shared volumes).
    used_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=VolumeStatus.choices)
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField()

    tenancy = TenantPath(organization="organization", project="project")

    class Meta:
        ordering = ["project", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(status="active"),
                name="one_active_volume_per_name",
            ),
        ]

    def __str__(self) -> str:
        return self.name
