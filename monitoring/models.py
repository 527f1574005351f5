"""Durable metrics: totals and histograms folded from the log by ``projections.Counters``.

Each row is one labelled series; the labels are a canonical JSON object (sorted keys), so one
series is one row. Only the projection's consumer writes them, holding its checkpoint's lock.
"""

from __future__ import annotations

from django.db import models


class MetricCounter(models.Model):
    name = models.CharField(max_length=128)
    labels_json = models.CharField(max_length=1000)
    value = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "labels_json"], name="metric_counter_series")
        ]

    def __str__(self) -> str:
        return f"{self.name}{self.labels_json} {self.value}"


class MetricHistogram(models.Model):
    """Observations per bucket (not cumulative: ``counts[i]`` fell in bucket ``i``, the last
    above every bound), their sum and their count."""

    name = models.CharField(max_length=128)
    labels_json = models.CharField(max_length=1000)
    counts = models.JSONField(default=list)
    total = models.FloatField(default=0)  # the sum of the observations
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "labels_json"], name="metric_histogram_series")
        ]

    def __str__(self) -> str:
        return f"{self.name}{self.labels_json} n={self.count}"


class TrackedWorkload(models.Model):
    """What the fold remembers of a workload between its events: its labels, since when it
    waits (submission or requeue; None while it holds GPUs or has finished), the allocation it
    holds, and whether it was counted as finished."""

    workload_id = models.UUIDField(primary_key=True)
    queue = models.CharField(max_length=64)
    priority_class = models.CharField(max_length=64)
    waiting_since = models.DateTimeField(null=True)
    allocation_id = models.UUIDField(null=True)
    finished = models.BooleanField(default=False)

    def __str__(self) -> str:
        return str(self.workload_id)
