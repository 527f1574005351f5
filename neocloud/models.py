"""Tables of the API conventions (not business state, so not in the log)."""

from __future__ import annotations

from django.db import models


class IdempotencyRecord(models.Model):
    """One ``Idempotency-Key`` of one caller: claimed first, completed with the response."""

    owner = models.CharField(max_length=80)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True)
    body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_key_per_owner"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return f"{self.owner} {self.key}"
