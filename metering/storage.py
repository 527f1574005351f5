"""Storage usage: a volume's provisioned size metered per GB-second from its events, from
``VolumeCreated`` to ``VolumeDeleted`` (their recorded times, which the volume's row keeps),
clipped to a period. Used or not: a volume is billed for what it holds room for."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID


@dataclass(frozen=True)
class StorageUsage:
    """One volume's part of a period."""

    volume_id: UUID
    project_id: UUID
    name: str
    volume_type: str
    size_gb: int
    gb_seconds: int


def provisioned_gb_seconds(
    size_gb: int, created_at: datetime, deleted_at: datetime | None, start: datetime, end: datetime
) -> int:
    """GB-seconds of ``size_gb`` between creation and deletion (or now-open), inside
    [start, end); whole seconds, as GPU usage is."""
    begin = max(created_at, start)
    finish = min(deleted_at or end, end)
    if finish <= begin:
        return 0
    return size_gb * int((finish - begin).total_seconds())
