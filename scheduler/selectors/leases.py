"""Who schedules each cluster now, for readiness: a cluster whose lease nobody holds (or
whose holder stopped renewing it) has no scheduler, and its work waits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from inventory.models import Cluster
from scheduler.models import SchedulerLease


@dataclass(frozen=True, slots=True)
class ClusterLease:
    cluster_id: uuid.UUID
    cluster_slug: str
    holder: str | None  # None: nobody holds it, or it expired
    expires_at: datetime | None


def cluster_leases(*, now: datetime) -> list[ClusterLease]:
    """Every cluster with its scheduler lease as of ``now``, in slug order."""
    leases = {lease.cluster_id: lease for lease in SchedulerLease.objects.all()}
    found = []
    for cluster_id, slug in Cluster.objects.order_by("slug").values_list("id", "slug"):
        lease = leases.get(cluster_id)
        if lease is None:
            found.append(ClusterLease(cluster_id, slug, holder=None, expires_at=None))
            continue
        held = lease.holder != "" and lease.expires_at > now
        holder = lease.holder if held else None
        found.append(ClusterLease(cluster_id, slug, holder=holder, expires_at=lease.expires_at))
    return found
