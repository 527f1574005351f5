"""``manage.py bench metering``: usage derived from a million allocation events.

The log is seeded in a scratch database with 500,000 grants and 500,000 releases (run ends,
preemptions, and a few second releases that must change nothing; a few allocations stay
open) of 50,000 workloads, in time order across a month's end, written with ``COPY`` (valid
payloads of the scheduler's types, in their streams). Then the usage consumer catches up
from position 0 in its batches, as ``events consume`` runs it; the baseline is one SQL
statement over the same events computing the same totals (first release per allocation by
position, GROUP BY organization, project, GPU model and price plan). The totals must match.
Beside them, a consumer that reads the same events and does nothing: the ceiling of the
consumer's read path at its batch size.
"""

from __future__ import annotations

import heapq
import json
import os
import platform
import random
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Sum

from bench.registry import peak_rss_mb, scratch_database, suite
from events import projections
from events.consumers import Consumer, ProjectionConsumer, consumer_catch_up
from events.store import RecordedEvent
from events.types import DomainEvent, deserialize
from metering.models import UsageSlice
from scheduler import events as ev

START = datetime(2026, 1, 20, tzinfo=UTC)  # the log crosses January's end
GRANT_EVERY_US = 6_000_000
ALLOCATIONS_PER_WORKLOAD = 10
CLUSTERS = [uuid.UUID(int=c + 1) for c in range(4)]
ORGANIZATIONS = [uuid.UUID(int=1000 + o) for o in range(20)]
PROJECTS_PER_ORGANIZATION = 5
MODELS = ("h100", "a100", "l40s")
PLANS = ("on_demand", "preemptible", "reserved")
SHAPES = ((1, 1000), (2, 1000), (4, 1000), (8, 1000), (1, 500), (3, 250))
META = json.dumps({"actor": "system:bench"})
COPY = (
    "COPY events_event (stream_type, stream_id, version, type, schema_version, data,"
    " metadata, organization_id, recorded_at) FROM STDIN"
)
BASELINE = """
WITH grants AS (
    SELECT data->>'allocation_id' AS allocation, data->>'workload_id' AS workload,
           data->>'organization_id' AS organization, data->>'project_id' AS project,
           data->>'gpu_model' AS gpu_model,
           (EXTRACT(EPOCH FROM (data->>'granted_at')::timestamptz) * 1000000)::bigint AS g,
           (SELECT SUM(jsonb_array_length(p->'gpus') * (p->>'gpu_milli')::bigint)
              FROM jsonb_array_elements(data->'placements') p)::bigint AS milli
      FROM events_event WHERE type = %(granted)s
), releases AS (
    SELECT DISTINCT ON (data->>'allocation_id') data->>'allocation_id' AS allocation,
           (EXTRACT(EPOCH FROM COALESCE((data->>'ended_at')::timestamptz,
                                        (data->>'released_at')::timestamptz, recorded_at))
            * 1000000)::bigint AS r
      FROM events_event
     WHERE type IN (%(released)s, %(preempted)s)
     ORDER BY data->>'allocation_id', position
), terms AS (
    SELECT data->>'workload_id' AS workload, data->>'price_plan' AS price_plan
      FROM events_event WHERE type = %(submitted)s
)
SELECT organization, project, gpu_model, price_plan,
       SUM(milli * (GREATEST(r, g) - g) / 1000000)
  FROM grants JOIN releases USING (allocation) JOIN terms USING (workload)
 GROUP BY 1, 2, 3, 4
"""

BASELINE_TYPES = {
    "granted": ev.AllocationGranted.event_type,
    "released": ev.AllocationReleased.event_type,
    "preempted": ev.WorkloadPreempted.event_type,
    "submitted": ev.WorkloadSubmitted.event_type,
}

Row = tuple[str, str, int, str, str, str | None, str]


class _ReadOnly(Consumer):
    """The same reads and checkpoints with no effects: the ceiling of any consumer."""

    name = "bench.metering_read_only"

    def __init__(self, types: frozenset[str] | None) -> None:
        self.types = types

    @property
    def event_types(self) -> frozenset[str] | None:
        return self.types

    def handle(self, event: RecordedEvent) -> None:
        pass


def _iso(micros: int) -> str:
    return (START + timedelta(microseconds=micros)).isoformat().replace("+00:00", "Z")


class _Seed:
    """The log's rows in append order; streams' versions counted as they go."""

    def __init__(self, allocations: int) -> None:
        self.allocations = allocations
        self.versions: dict[tuple[str, str], int] = {}
        self.random = random.Random(7)  # noqa: S311 (a benchmark's data, not a secret)

    def _row(
        self, stream: str, stream_id: str, kind: type[DomainEvent], data: dict[str, Any], at: int
    ) -> Row:
        version = self.versions.get((stream, stream_id), 0) + 1
        self.versions[(stream, stream_id)] = version
        organization = data.get("organization_id")
        return (
            stream,
            stream_id,
            version,
            kind.event_type,
            json.dumps(data),
            organization,
            _iso(at),
        )

    def rows(self) -> Iterator[Row]:
        """Grants every 6 s; each released after 1 s to 6 h (a heap of pending releases keeps
        memory flat); every 50th stays open, every 50th+1 is released twice."""
        pending: list[tuple[int, int, str, str, str, str]] = []
        for n in range(self.allocations):
            now = n * GRANT_EVERY_US
            while pending and pending[0][0] <= now:
                yield self._release(*heapq.heappop(pending)[:6])
            workload = str(uuid.UUID(int=(1 << 64) + n // ALLOCATIONS_PER_WORKLOAD))
            w = n // ALLOCATIONS_PER_WORKLOAD
            organization = ORGANIZATIONS[w % len(ORGANIZATIONS)]
            project = uuid.UUID(int=2000 + (w % (len(ORGANIZATIONS) * PROJECTS_PER_ORGANIZATION)))
            cluster = str(CLUSTERS[w % len(CLUSTERS)])
            if n % ALLOCATIONS_PER_WORKLOAD == 0:
                yield self._submitted(workload, organization, project, cluster, w, now)
            allocation = str(uuid.UUID(int=(2 << 64) + n))
            gpus, milli = SHAPES[n % len(SHAPES)]
            yield self._row(
                "schedule",
                cluster,
                ev.AllocationGranted,
                {
                    "allocation_id": allocation,
                    "workload_id": workload,
                    "organization_id": str(organization),
                    "project_id": str(project),
                    "gpu_model": MODELS[w % len(MODELS)],
                    "placements": [
                        {
                            "node_id": str(uuid.UUID(int=(3 << 64) + n % 997)),
                            "node": f"n{n % 997}",
                            "gpus": list(range(gpus)),
                            "gpu_milli": milli,
                            "cpu_milli": 1000,
                            "memory_mib": 1024,
                        }
                    ],
                    "granted_at": _iso(now),
                },
                now,
            )
            if n % 50 == 0:
                continue  # stays open
            end = now + self.random.randint(1_000_000, 6 * 3600 * 1_000_000)
            how = "preempted" if n % 13 == 0 else "released"
            heapq.heappush(pending, (end, n, how, allocation, workload, cluster))
            if n % 50 == 1:  # a run end racing the preemption, later in the log
                heapq.heappush(pending, (end + 1, n, "released", allocation, workload, cluster))
        while pending:
            yield self._release(*heapq.heappop(pending)[:6])

    def _submitted(
        self,
        workload: str,
        organization: uuid.UUID,
        project: uuid.UUID,
        cluster: str,
        w: int,
        at: int,
    ) -> Row:
        return self._row(
            "workload",
            workload,
            ev.WorkloadSubmitted,
            {
                "workload_id": workload,
                "organization_id": str(organization),
                "project_id": str(project),
                "cluster_id": cluster,
                "name": f"w{w}",
                "kind": "job",
                "gpu_models": list(MODELS),
                "gpus_per_node": 1,
                "nodes": 1,
                "min_nodes": None,
                "gpu_milli": 1000,
                "cpu_milli": 1000,
                "memory_mib": 1024,
                "priority_class": "default",
                "priority": 0,
                "preemptible": True,
                "topology": "any",
                "runtime_estimate_s": None,
                "max_runtime_s": None,
                "retry_limit": 0,
                "restart_policy": "never",
                "reservation_id": None,
                "price_plan": PLANS[w % len(PLANS)],
                "offering": None,
                "order_id": None,
            },
            at,
        )

    def _release(
        self, at: int, n: int, how: str, allocation: str, workload: str, cluster: str
    ) -> Row:
        if how == "preempted":  # released at the event's recorded_at
            data = {
                "workload_id": workload,
                "allocation_id": allocation,
                "by_workload_id": workload,
                "reason": "priority",
            }
            return self._row("schedule", cluster, ev.WorkloadPreempted, data, at)
        data = {
            "allocation_id": allocation,
            "cluster_id": cluster,
            "reason": "succeeded",
            "message": "",
            "status": "succeeded",
            "released_at": _iso(at),
        }
        return self._row("workload", workload, ev.AllocationReleased, data, at)


def _seed(allocations: int) -> int:
    """COPY the log in; the first event of each type is checked against its payload class."""
    checked: set[str] = set()
    written = 0
    raw = connection.connection
    assert raw is not None  # noqa: S101 (connected by scratch_database)
    with raw.cursor() as cursor, cursor.copy(COPY) as copy:
        for stream, stream_id, version, kind, data, organization, at in _Seed(allocations).rows():
            if kind not in checked:
                deserialize(kind, json.loads(data))
                checked.add(kind)
            copy.write_row((stream, stream_id, version, kind, 1, data, META, organization, at))
            written += 1
    raw.commit()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE events_event")
    return written


def _metered_totals() -> dict[tuple[str, str, str, str], int]:
    rows = UsageSlice.objects.values_list(
        "organization_id", "project_id", "gpu_model", "price_plan"
    ).order_by()
    return {
        (str(o), str(p), m, plan): int(total)
        for o, p, m, plan, total in rows.annotate(total=Sum("milli_gpu_seconds"))
    }


@suite("metering")
def metering(scale: float) -> dict[str, Any]:
    """Usage consumer catch-up against one SQL aggregation; see the module docstring."""
    if connection.vendor != "postgresql":
        raise CommandError("bench metering measures PostgreSQL: set DATABASE_URL")
    allocations = max(1000, int(500_000 * scale))
    (usage,) = [p for p in projections.asynchronous() if p.name == "metering.usage"]
    with scratch_database():
        connection.ensure_connection()
        started = time.perf_counter()
        events = _seed(allocations)
        seed_s = time.perf_counter() - started

        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(BASELINE, BASELINE_TYPES)
            baseline = {(o, p, m, plan): int(total) for o, p, m, plan, total in cursor.fetchall()}
        baseline_s = time.perf_counter() - started

        reader = _ReadOnly(usage.event_types)
        started = time.perf_counter()
        consumer_catch_up(reader)
        read_only_s = time.perf_counter() - started

        consumer = ProjectionConsumer(usage)
        started = time.perf_counter()
        read = consumer_catch_up(consumer)
        metering_s = time.perf_counter() - started

        totals = _metered_totals()
        slices = UsageSlice.objects.count()
        server_version = connection.cursor().connection.info.server_version

    ours = round(read / metering_s, 1)
    theirs = round(events / baseline_s, 1)
    return {
        "suite": "metering",
        "unit": "events/s",
        "scale": scale,
        "log_events": events,
        "allocations": allocations,
        "figures": {
            "metering_events_per_s": ours,
            "metering_events": read,
            "metering_s": round(metering_s, 2),
            "consumer_batch_size": consumer.batch_size,
            "consumer_read_only_events_per_s": round(read / read_only_s, 1),
            "usage_slices": slices,
            "sql_baseline_events_per_s": theirs,
            "sql_baseline_s": round(baseline_s, 2),
            "seed_s": round(seed_s, 2),
        },
        "baseline": "one SQL statement over the same events computing the same totals",
        "ratios": {"metering_vs_sql_baseline": round(ours / theirs, 3) if theirs else None},
        "totals_match": totals == baseline,
        "total_milli_gpu_seconds": sum(totals.values()),
        "peak_rss_mb": peak_rss_mb(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": server_version,
        },
    }
