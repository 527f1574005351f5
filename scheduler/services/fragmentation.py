"""Fragmentation samples for the operators' chart: telemetry written in place, not events
(nothing replays them, and the log would grow by a sample set every few minutes forever).

Each sample set is stamped with the start of its interval and a unique constraint holds one
per interval, so concurrent ticks (two beats, a tick and the demo's thread) write it once;
samples past the retention go on the same tick, so the table stays bounded.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from scheduler.models import FragmentationSample
from scheduler.selectors.fragmentation import fleet_fragmentation


def _interval_start(now: datetime, seconds: float) -> datetime:
    epoch = now.timestamp()
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=now.tzinfo)


def fragmentation_sample(*, now: datetime) -> int:
    """Record the fleet's fragmentation for the interval ``now`` is in, unless it already is,
    and delete samples older than ``FRAGMENTATION_RETENTION_DAYS``; returns the samples
    taken (none are written twice: a concurrent tick's conflict is ignored).
    ``FRAGMENTATION_SAMPLE_S`` = 0: nothing is sampled."""
    interval = settings.FRAGMENTATION_SAMPLE_S
    if interval <= 0:
        return 0
    at = _interval_start(now, interval)
    if FragmentationSample.objects.filter(at=at).exists():
        return 0
    samples = [
        FragmentationSample(
            cluster_id=figures.cluster_id,
            gpu_model=figures.gpu_model,
            shape=fit.shape.label,
            startable=fit.startable,
            would_hold=fit.would_hold,
            free=fit.free,
            at=at,
        )
        for figures in fleet_fragmentation()
        for fit in figures.shapes
    ]
    FragmentationSample.objects.bulk_create(samples, ignore_conflicts=True)
    horizon = now - timedelta(days=settings.FRAGMENTATION_RETENTION_DAYS)
    FragmentationSample.objects.filter(at__lt=horizon).delete()
    return len(samples)
