"""Projections of the gateway's events."""

from __future__ import annotations

import uuid

from django.db import models


class EndpointToken(models.Model):
    """A program's way through the gateway to one web port; the token itself is shown once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE)
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE)
    workload = models.ForeignKey("scheduler.Workload", on_delete=models.CASCADE)
    port = models.PositiveIntegerField()
    name = models.CharField(max_length=128, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    created_by = models.UUIDField(null=True)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.prefix} ({self.workload_id}:{self.port})"
