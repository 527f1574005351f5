"""Which workloads mount a volume (``storage.hooks.volume_in_use``)."""

from __future__ import annotations

import uuid

from scheduler.models import FINAL_STATUSES, Workload


def workload_mounting(project_id: uuid.UUID, volume_id: uuid.UUID) -> str | None:
    """The name of a workload of the project not yet finished that mounts the volume. The
    project's unfinished workloads are bounded (``WAITING_WORKLOADS_PER_PROJECT`` and its
    running ones), and only those that mount something are read."""
    wanted = str(volume_id)
    rows = (
        Workload.objects.filter(project_id=project_id)
        .exclude(status__in=FINAL_STATUSES)
        .exclude(volumes=[])
        .values_list("name", "volumes")
    )
    for name, mounts in rows.iterator():
        if any(m["volume"] == wanted for m in mounts):
            return name
    return None
