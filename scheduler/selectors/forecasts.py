"""What a forecast of one cluster reads: its state as a cycle run now would see it (fair-share
usage in the policy, as a cycle has it) and the runtimes its log has taught."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings

from scheduler.engine.forecast import RuntimeOf
from scheduler.engine.model import Policy, Snapshot
from scheduler.engine.runtimes import RuntimeBook
from scheduler.selectors.runtimes import runtime_book, runtimes_of
from scheduler.snapshot import ClusterView, cluster_usage, cluster_view, snapshot_of


@dataclass(frozen=True)
class ForecastInputs:
    view: ClusterView
    snapshot: Snapshot
    policy: Policy
    runtime_of: RuntimeOf  # of the work in the view
    book: RuntimeBook  # for work not in it yet


def forecast_inputs(cluster_id: uuid.UUID, now: datetime) -> ForecastInputs:
    view = cluster_view(cluster_id)
    usage = cluster_usage(cluster_id, settings.SCHEDULER_FAIRSHARE_HALF_LIFE_S, now)
    queues, organizations = usage.as_of(now.timestamp())
    book = runtime_book(cluster_id)
    return ForecastInputs(
        view=view,
        snapshot=snapshot_of(view),
        policy=replace(view.policy, usage_history=queues, organization_usage=organizations),
        runtime_of=runtimes_of(view, book, now.timestamp()),
        book=book,
    )
