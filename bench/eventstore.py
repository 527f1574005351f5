"""``manage.py bench eventstore``: the store against plain INSERTs and the eventsourcing peer.

Everything runs in one process against one scratch PostgreSQL database, so the figures are
read as ratios: our append against plain batched ``INSERT``s of the same rows through psycopg
(the floor any store pays), and against the ``eventsourcing`` library's PostgreSQL recorder
(the peer, which serialises writers with a table lock where we take an advisory lock).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from django.core.management.base import CommandError
from django.db import connection, connections

from bench.registry import peak_rss_mb, scratch_database, suite
from events import store
from events.consumers import Consumer, consumer_catch_up
from events.replay import projections_replay
from events.store import Metadata, RecordedEvent
from events.streams import StreamHeads
from events.types import DomainEvent, event_type
from events.wakeup import psycopg_params

STREAMS = 100
NOTE = "x" * 48  # a payload of about the size of a typical domain event
META = Metadata(actor="system:bench")


@event_type("bench.Measured")
class Measured(DomainEvent):
    n: int
    note: str


class NullConsumer(Consumer):
    """Reads and discards: measures the consumer's read path and checkpoint writes."""

    name = "bench.null"
    batch_size = 2000

    def handle(self, event: RecordedEvent) -> None:
        pass


def _rate(events: int, seconds: float) -> float:
    return round(events / seconds, 1) if seconds > 0 else 0.0


def _timed(work: Callable[[], int]) -> float:
    started = time.perf_counter()
    events = work()
    return _rate(events, time.perf_counter() - started)


# --- the store -------------------------------------------------------------------------------


def _append_serially(prefix: str, appends: int, batch: int) -> int:
    versions = [0] * STREAMS
    for n in range(appends):
        stream = n % STREAMS
        store.append(
            "bench",
            f"{prefix}-{stream}",
            [Measured(n=n, note=NOTE) for _ in range(batch)],
            expected_version=versions[stream],
            metadata=META,
        )
        versions[stream] += batch
    return appends * batch


def _concurrent_writer(worker: int, appends: int, batch: int, barrier: Any) -> None:
    barrier.wait()
    _append_serially(f"w{worker}-{batch}-{uuid.uuid4().hex[:6]}", appends, batch)
    connection.close()


def _append_concurrently(writers: int, appends: int, batch: int) -> float:
    connections.close_all()  # each child opens its own
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(writers + 1)
    processes = [
        context.Process(target=_concurrent_writer, args=(w, appends, batch, barrier))
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    barrier.wait()
    started = time.perf_counter()
    for process in processes:
        process.join()
    elapsed = time.perf_counter() - started
    if any(p.exitcode != 0 for p in processes):
        raise CommandError("a concurrent writer failed")
    return _rate(writers * appends * batch, elapsed)


# --- the baseline: plain INSERTs of the same rows ---------------------------------------------


def _baseline_insert(appends: int, batch: int) -> float:
    meta = json.dumps(META.as_dict())
    with psycopg.connect(**psycopg_params()) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_baseline"
            " (LIKE events_event INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)"
        )
        conn.commit()
        sql = (
            "INSERT INTO bench_baseline (stream_type, stream_id, version, type, schema_version,"
            " data, metadata, organization_id, recorded_at)"
            " VALUES (%s, %s, %s, %s, 1, %s::jsonb, %s::jsonb, NULL, now())"
        )
        prefix = uuid.uuid4().hex[:6]
        versions = [0] * STREAMS
        started = time.perf_counter()
        for n in range(appends):
            stream = n % STREAMS
            rows = [
                (
                    "bench",
                    f"{prefix}-{stream}",
                    versions[stream] + i + 1,
                    "bench.Measured",
                    json.dumps({"n": n, "note": NOTE}),
                    meta,
                )
                for i in range(batch)
            ]
            with conn.cursor() as cursor:
                cursor.executemany(sql, rows)
            conn.commit()
            versions[stream] += batch
        return _rate(appends * batch, time.perf_counter() - started)


# --- the peer: eventsourcing's PostgreSQL application recorder --------------------------------


def _eventsourcing_insert(appends: int, batch: int) -> float | None:
    try:
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
    except ImportError:  # the peer is a benchmark-only dependency (extra "bench")
        return None
    params = psycopg_params()
    datastore = PostgresDatastore(
        dbname=params["dbname"],
        host=params.get("host", "127.0.0.1"),
        port=params.get("port", 5432),
        user=params.get("user", "postgres"),
        password=params.get("password", ""),
    )
    try:
        recorder = PostgresApplicationRecorder(datastore, events_table_name="bench_peer")
        recorder.create_table()
        streams = [uuid.uuid4() for _ in range(STREAMS)]
        versions = [0] * STREAMS
        started = time.perf_counter()
        for n in range(appends):
            stream = n % STREAMS
            state = json.dumps({"n": n, "note": NOTE}).encode()
            recorder.insert_events(
                [
                    StoredEvent(
                        originator_id=streams[stream],
                        originator_version=versions[stream] + i + 1,
                        topic="bench:Measured",
                        state=state,
                    )
                    for i in range(batch)
                ]
            )
            versions[stream] += batch
        return _rate(appends * batch, time.perf_counter() - started)
    finally:
        datastore.close()


def _ratio(ours: float, theirs: float | None) -> float | None:
    return round(ours / theirs, 3) if theirs else None


@suite("eventstore")
def eventstore(scale: float) -> dict[str, Any]:
    """Append, catch-up read and replay throughput; see the module docstring."""
    if connection.vendor != "postgresql":
        raise CommandError("bench eventstore measures PostgreSQL: set DATABASE_URL")
    singles = max(10, int(2000 * scale))
    hundreds = max(2, int(200 * scale))
    concurrent_appends = max(2, int(50 * scale))
    catchup_events = max(1000, int(200_000 * scale))
    with scratch_database():
        figures: dict[str, Any] = {}
        # Warm up connections and caches so the first measurement is not penalised.
        _append_serially("warmup", 20, 10)
        _baseline_insert(20, 10)

        figures["append_batch1_events_per_s"] = _timed(lambda: _append_serially("b1", singles, 1))
        figures["append_batch100_events_per_s"] = _timed(
            lambda: _append_serially("b100", hundreds, 100)
        )
        figures["append_4writers_batch1_events_per_s"] = _append_concurrently(
            4, max(5, singles // 4), 1
        )
        figures["append_4writers_batch100_events_per_s"] = _append_concurrently(
            4, concurrent_appends, 100
        )
        figures["baseline_insert_batch1_events_per_s"] = _baseline_insert(singles, 1)
        figures["baseline_insert_events_per_s"] = _baseline_insert(hundreds, 100)
        figures["eventsourcing_batch1_events_per_s"] = _eventsourcing_insert(singles, 1)
        figures["eventsourcing_batch100_events_per_s"] = _eventsourcing_insert(hundreds, 100)

        missing = catchup_events - store.head_position()
        if missing > 0:
            _append_serially("fill", -(-missing // 500), 500)
        log_size = store.head_position()
        server_version = connection.cursor().connection.info.server_version

        started = time.perf_counter()
        read = consumer_catch_up(NullConsumer())
        figures["catchup_read_events_per_s"] = _rate(read, time.perf_counter() - started)
        figures["catchup_events"] = read

        started = time.perf_counter()
        replayed = projections_replay(names=[StreamHeads.name])
        figures["replay_events_per_s"] = _rate(replayed, time.perf_counter() - started)
        figures["replay_events"] = replayed

    ours_1 = figures["append_batch1_events_per_s"]
    ours_100 = figures["append_batch100_events_per_s"]
    return {
        "suite": "eventstore",
        "unit": "events/s",
        "scale": scale,
        "log_events": log_size,
        "figures": figures,
        "baseline": "plain batched psycopg INSERTs of the same rows (baseline_insert_*)",
        "ratios": {
            "append_vs_baseline": _ratio(ours_100, figures["baseline_insert_events_per_s"]),
            "append_batch1_vs_baseline": _ratio(
                ours_1, figures["baseline_insert_batch1_events_per_s"]
            ),
            "append_vs_eventsourcing": _ratio(
                ours_100, figures["eventsourcing_batch100_events_per_s"]
            ),
            "append_batch1_vs_eventsourcing": _ratio(
                ours_1, figures["eventsourcing_batch1_events_per_s"]
            ),
        },
        "peak_rss_mb": peak_rss_mb(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": server_version,
        },
    }
