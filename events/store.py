"""Appending to and reading from the log.

Position order is commit order. Every append takes one database-wide append lock (a
transaction-level advisory lock on PostgreSQL; SQLite's write lock, taken at BEGIN, on the
embedded default) before it draws positions, and keeps it until its transaction commits. So no
event can commit with a position below one a reader has already seen, and a consumer that
reads ``position > checkpoint`` never skips one. The price is that appends are serialised:
append as late in a transaction as you can.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from events import projections, wakeup
from events.errors import StreamConflict
from events.models import Event
from events.types import DomainEvent, Payload, serialize, upcast
from events.types import RecordedEvent as RecordedEvent  # re-exported: what reads return
from neocloud.core.correlation import correlation_current

TABLE = Event._meta.db_table
INSERT_COLUMNS = (
    "stream_type, stream_id, version, type, schema_version, data, metadata, organization_id,"
    " recorded_at"
)
COLUMNS = (
    "position, stream_type, stream_id, version, type, schema_version, data, metadata, recorded_at"
)


_ORGANIZATION = Event._meta.get_field("organization_id")
# Raised by events_append (migration 0003) when the stream is not at the expected version.
CONFLICT_SQLSTATE = "NC409"


class ExpectedVersion(enum.Enum):
    """Concurrency modes besides an exact version number."""

    ANY = "any"
    NO_STREAM = "no_stream"


ANY = ExpectedVersion.ANY
NO_STREAM = ExpectedVersion.NO_STREAM


@dataclass(frozen=True, slots=True)
class Metadata:
    """Who and what caused an append. ``actor`` is ``user:<id>``, ``api_key:<prefix>`` or
    ``system:<component>``."""

    actor: str = "system:neocloud"
    organization_id: UUID | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    idempotency_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"actor": self.actor}
        for key in ("organization_id", "correlation_id", "causation_id", "idempotency_key"):
            value = getattr(self, key)
            if value is not None:
                data[key] = str(value)
        # Without an id of its own, an append takes the one of the request or task doing it:
        # a Celery task's system actor, a scheduling cycle, a webhook then carry the id of the
        # call that caused them (neocloud.core.correlation).
        bound = correlation_current()
        if "correlation_id" not in data and bound is not None:
            data["correlation_id"] = bound
        data.update(self.extra)
        return data


def append(
    stream_type: str,
    stream_id: str,
    events: Sequence[DomainEvent],
    *,
    expected_version: int | ExpectedVersion,
    metadata: Metadata | None = None,
) -> list[RecordedEvent]:
    """Append ``events`` to one stream, atomically with the synchronous projections.

    ``expected_version`` is the version the caller read (0 for a new stream), ``NO_STREAM`` to
    insist the stream is new, or ``ANY``. On a mismatch, ``StreamConflict`` is raised and
    nothing is written. The append lock is held until the enclosing transaction commits.
    """
    if not events:
        raise ValueError("append needs at least one event")
    batch = _Batch(
        stream_type=stream_type,
        stream_id=str(stream_id),
        expected=_expected_number(expected_version),
        payloads=[serialize(event) for event in events],
        metadata=(metadata or Metadata()).as_dict(),
        recorded_at=timezone.now(),
    )
    insert = _insert_postgres if connection.vendor == "postgresql" else _insert_sqlite
    try:
        with transaction.atomic():
            recorded = insert(batch)
            projections.apply_synchronous(recorded)
            wakeup.announce()
    except DatabaseError as exc:
        conflict = _as_conflict(exc, batch)
        if conflict is exc:
            raise  # as it is: its cause (the driver's error) tells a deadlock from the rest
        raise conflict from exc
    return recorded


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """One stream's part of ``append_streams``: as ``append``'s arguments (but ``ANY``)."""

    stream_type: str
    stream_id: str
    events: Sequence[DomainEvent]
    expected_version: int | ExpectedVersion
    metadata: Metadata | None = None


def append_streams(appends: Sequence[StreamAppend]) -> list[RecordedEvent]:
    """Append to several streams at once, atomically: one lock, one check of every stream's
    version, one INSERT and one pass of the synchronous projections, where ``append`` per
    stream takes a round trip and a projection pass each. Each stream's version is checked as
    ``append`` checks it; on a mismatch, ``StreamConflict`` names the first stream and
    nothing is written. Events come back in the order given, stream by stream."""
    if not appends or any(not a.events for a in appends):
        raise ValueError("append_streams needs at least one event per stream")
    if len({(a.stream_type, str(a.stream_id)) for a in appends}) != len(appends):
        raise ValueError("append_streams takes each stream once")
    if any(a.expected_version is ANY for a in appends):
        raise ValueError("append_streams needs each stream's expected version (or NO_STREAM)")
    recorded_at = timezone.now()
    rows: _Rows = []
    for part in appends:
        meta = (part.metadata or Metadata()).as_dict()
        first = (_expected_number(part.expected_version) or 0) + 1
        for version, event in enumerate(part.events, start=first):
            rows.append((part.stream_type, str(part.stream_id), version, *serialize(event), meta))
    insert = _insert_rows_postgres if connection.vendor == "postgresql" else _insert_rows_sqlite
    try:
        with transaction.atomic():
            take_append_lock()
            _check_versions(appends)
            position_of = insert(rows, recorded_at)
            recorded = [
                RecordedEvent(
                    position=position_of[(stream_type, stream_id, version)],
                    stream_type=stream_type,
                    stream_id=stream_id,
                    version=version,
                    type=type_name,
                    schema_version=schema_version,
                    data=data,
                    metadata=meta,
                    recorded_at=recorded_at,
                )
                for stream_type, stream_id, version, type_name, schema_version, data, meta in rows
            ]
            projections.apply_synchronous(recorded)
            wakeup.announce()
    except IntegrityError as exc:
        if "events_stream_version_uniq" not in str(exc):
            raise
        # Only reachable by a writer that bypassed the append lock; the unique key still holds.
        _check_versions(appends)
        raise
    return recorded


def append_new_streams(
    stream_type: str,
    streams: Sequence[tuple[str, Sequence[DomainEvent]]],
    *,
    metadata: Metadata | None = None,
) -> list[RecordedEvent]:
    """Start several streams of one type (each must be new, ``NO_STREAM``) in one
    ``append_streams``."""
    return append_streams(
        [
            StreamAppend(stream_type, str(stream_id), events, NO_STREAM, metadata)
            for stream_id, events in streams
        ]
    )


# stream type, stream id, version, event type, schema version, data, metadata
_Rows = list[tuple[str, str, int, str, int, Payload, dict[str, Any]]]
_Positions = dict[tuple[str, str, int], int]
_SQLITE_ROWS_PER_INSERT = 500  # 9 parameters a row, under SQLite's limit of 32,766


def _check_versions(appends: Sequence[StreamAppend]) -> None:
    """Under the append lock: every stream is at the version its append expects."""
    current = _versions([(a.stream_type, str(a.stream_id)) for a in appends])
    for part in appends:
        expected = _expected_number(part.expected_version)
        actual = current.get((part.stream_type, str(part.stream_id)), 0)
        if expected != actual:
            raise StreamConflict(part.stream_type, str(part.stream_id), expected, actual)


def _versions(streams: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The current version of each of ``streams`` that has events, in one query."""
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT e.stream_type, e.stream_id, MAX(e.version) FROM {TABLE} e"  # noqa: S608
            " JOIN jsonb_to_recordset(%s::jsonb) AS s(t text, i text)"
            " ON e.stream_type = s.t AND e.stream_id = s.i GROUP BY 1, 2"
        )
        params: list[Any] = [json.dumps([{"t": t, "i": i} for t, i in streams])]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {(t, i): int(v) for t, i, v in cursor.fetchall()}
    return {stream: v for stream in streams if (v := stream_version(*stream))}


def _insert_rows_postgres(rows: _Rows, recorded_at: datetime) -> _Positions:
    """Every row in one INSERT; the rows travel as one JSON array, as ``events_append``'s."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} AS ev ({INSERT_COLUMNS})"  # noqa: S608
            " SELECT u.e->>0, u.e->>1, (u.e->>2)::integer, u.e->>3, (u.e->>4)::smallint,"
            " u.e->5, u.e->6, (u.e->6->>'organization_id')::uuid, %s"
            " FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS u(e, i) ORDER BY u.i"
            " RETURNING ev.stream_type, ev.stream_id, ev.version, ev.position",
            [recorded_at, json.dumps(rows)],
        )
        return {(t, i, v): position for t, i, v, position in cursor.fetchall()}


def _insert_rows_sqlite(rows: _Rows, recorded_at: datetime) -> _Positions:
    """The same on SQLite, in chunks that stay under its limit of bound parameters."""
    stamp = connection.ops.adapt_datetimefield_value(recorded_at)
    position_of: _Positions = {}
    for start in range(0, len(rows), _SQLITE_ROWS_PER_INSERT):
        chunk = rows[start : start + _SQLITE_ROWS_PER_INSERT]
        params: list[Any] = []
        for stream_type, stream_id, version, type_name, schema_version, data, meta in chunk:
            organization = meta.get("organization_id")
            params += [
                stream_type,
                stream_id,
                version,
                type_name,
                schema_version,
                json.dumps(data),
                json.dumps(meta),
                _ORGANIZATION.get_db_prep_value(organization, connection) if organization else None,
                stamp,
            ]
        row = "(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} ({INSERT_COLUMNS})"  # noqa: S608
                f" VALUES {', '.join([row] * len(chunk))}"
                " RETURNING stream_type, stream_id, version, position",
                params,
            )
            position_of.update({(t, i, v): p for t, i, v, p in cursor.fetchall()})
    return position_of


def take_append_lock() -> None:
    """Serialise with every writer until this transaction ends (a no-op on SQLite, where the
    IMMEDIATE transaction already holds the database's write lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT events_append_lock()")


@dataclass(frozen=True, slots=True)
class _Batch:
    stream_type: str
    stream_id: str
    expected: int | None  # None: any version
    payloads: list[tuple[str, int, Payload]]
    metadata: dict[str, Any]
    recorded_at: datetime

    @property
    def organization_id(self) -> str | None:
        return self.metadata.get("organization_id")

    def recorded(self, first_version: int, position_of: dict[int, int]) -> list[RecordedEvent]:
        return [
            RecordedEvent(
                position=position_of[version],
                stream_type=self.stream_type,
                stream_id=self.stream_id,
                version=version,
                type=type_name,
                schema_version=schema_version,
                data=data,
                metadata=self.metadata,
                recorded_at=self.recorded_at,
            )
            for version, (type_name, schema_version, data) in enumerate(
                self.payloads, start=first_version
            )
        ]


def _expected_number(expected: int | ExpectedVersion) -> int | None:
    if expected is ANY:
        return None
    if expected is NO_STREAM:
        return 0
    if not isinstance(expected, int) or expected < 0:
        raise ValueError(f"expected_version must be ANY, NO_STREAM or an int >= 0: {expected!r}")
    return expected


def _insert_postgres(batch: _Batch) -> list[RecordedEvent]:
    """Lock, check the version and insert in one round trip (``events_append``, migration
    0003). The batch travels as one JSON array: binding one parameter per column per row
    costs psycopg more than the INSERT costs the server."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT out_version, out_position FROM events_append(%s, %s, %s, %s::jsonb,"
            " %s::jsonb, %s, %s)",
            [
                batch.stream_type,
                batch.stream_id,
                batch.expected,
                json.dumps(batch.payloads),
                json.dumps(batch.metadata),
                batch.organization_id,
                batch.recorded_at,
            ],
        )
        position_of = dict(cursor.fetchall())
    return batch.recorded(min(position_of), position_of)


def _insert_sqlite(batch: _Batch) -> list[RecordedEvent]:
    """The same on SQLite, whose IMMEDIATE transaction already holds the write lock."""
    current = stream_version(batch.stream_type, batch.stream_id)
    if batch.expected is not None and batch.expected != current:
        raise StreamConflict(batch.stream_type, batch.stream_id, batch.expected, current)
    organization = (
        _ORGANIZATION.get_db_prep_value(batch.organization_id, connection)
        if batch.organization_id
        else None
    )
    stamp = connection.ops.adapt_datetimefield_value(batch.recorded_at)
    meta_json = json.dumps(batch.metadata)
    params: list[Any] = []
    for version, (type_name, schema_version, data) in enumerate(batch.payloads, start=current + 1):
        params += [
            batch.stream_type,
            batch.stream_id,
            version,
            type_name,
            schema_version,
            json.dumps(data),
            meta_json,
            organization,
            stamp,
        ]
    row = "(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} ({INSERT_COLUMNS})"  # noqa: S608
            f" VALUES {', '.join([row] * len(batch.payloads))} RETURNING version, position",
            params,
        )
        position_of = dict(cursor.fetchall())
    return batch.recorded(current + 1, position_of)


def _as_conflict(exc: DatabaseError, batch: _Batch) -> Exception:
    """Turn the database's refusals into ``StreamConflict``; anything else stays as it is."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == CONFLICT_SQLSTATE:
        actual = int(cause.diag.message_detail)  # type: ignore[union-attr]
        return StreamConflict(batch.stream_type, batch.stream_id, batch.expected, actual)
    if isinstance(exc, IntegrityError) and "events_stream_version_uniq" in str(exc):
        # Only reachable by a writer that bypassed the append lock; the unique key still holds.
        actual = stream_version(batch.stream_type, batch.stream_id)
        return StreamConflict(batch.stream_type, batch.stream_id, batch.expected, actual)
    return exc


def stream_version(stream_type: str, stream_id: str) -> int:
    """The stream's current version: 0 when it has no events."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MAX(version) FROM {TABLE} WHERE stream_type = %s AND stream_id = %s",  # noqa: S608
            [stream_type, str(stream_id)],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def head_position() -> int:
    """The highest committed position (0 for an empty log)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX(position) FROM {TABLE}")  # noqa: S608
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def touched_since(
    after: int,
    *,
    streams: Mapping[str, Collection[str]],
    carrying: tuple[str, str],
    types: Collection[str],
) -> tuple[int, bool]:
    """The head, and whether an event after ``after`` up to it is on one of ``streams`` (ids
    by stream type), carries ``data[key] == value`` (``carrying``), or is of one of ``types``.
    The head is read first: position order is commit order, so no event up to it commits
    later. The second statement scans only the positions after ``after`` (the primary key's
    range) and stops at the first that matches."""
    head = head_position()
    if head <= after:
        return head, False
    key, value = carrying
    concerning = Q(type__in=list(types)) | Q(**{f"data__{key}": value})
    for stream_type, ids in streams.items():
        concerning |= Q(stream_type=stream_type, stream_id__in=list(ids))
    touched = Event.objects.filter(concerning, position__gt=after, position__lte=head).exists()
    return head, touched


def newest_of_types(types: Collection[str]) -> tuple[int, datetime] | None:
    """The position and time of the newest event of any of ``types`` (None: there is none).
    One statement: an index probe per type (``events_type_position_idx``), however long the
    log. The time tells apart two events given one position (a rolled-back SQLite append)."""
    if not types:
        return None
    newest = ", ".join(
        [f"(SELECT MAX(position) FROM {TABLE} WHERE type = %s)"] * len(types)  # noqa: S608
    )
    sql = (
        f"SELECT position, recorded_at FROM {TABLE} WHERE position IN ({newest})"  # noqa: S608
        " ORDER BY position DESC LIMIT 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, sorted(types))
        row = cursor.fetchone()
    return (int(row[0]), row[1]) if row else None


def read_all(
    *, after: int = 0, limit: int = 1000, types: Collection[str] | None = None
) -> list[RecordedEvent]:
    """Events with ``position > after`` in position order, optionally only of ``types``."""
    sql = f"SELECT {COLUMNS} FROM {TABLE} WHERE position > %s"  # noqa: S608
    params: list[Any] = [after]
    if types is not None:
        if not types:
            return []
        sql += f" AND type IN ({', '.join(['%s'] * len(types))})"
        params += sorted(types)
    sql += " ORDER BY position LIMIT %s"
    params.append(limit)
    return _fetch(sql, params)


def iter_batches(
    *, after: int = 0, batch_size: int = 2000, types: Collection[str] | None = None
) -> Iterator[list[RecordedEvent]]:
    """Every event after ``after``, in keyset-paginated batches (memory stays bounded)."""
    while True:
        batch = read_all(after=after, limit=batch_size, types=types)
        if batch:
            yield batch
        if len(batch) < batch_size:
            return
        after = batch[-1].position


def read_stream(stream_type: str, stream_id: str, *, after_version: int = 0) -> list[RecordedEvent]:
    """One stream's events in version order."""
    sql = (
        f"SELECT {COLUMNS} FROM {TABLE} WHERE stream_type = %s AND stream_id = %s"  # noqa: S608
        " AND version > %s ORDER BY version"
    )
    return _fetch(sql, [stream_type, str(stream_id), after_version])


def _fetch(sql: str, params: list[Any]) -> list[RecordedEvent]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [_recorded(row) for row in rows]


def _recorded(row: Sequence[Any]) -> RecordedEvent:
    position, stream_type, stream_id, version, type_name, schema_version, data, meta, at = row
    if isinstance(data, str):
        data = json.loads(data)
    if isinstance(meta, str):
        meta = json.loads(meta)
    if isinstance(at, str):
        at = parse_datetime(at)
    if at.tzinfo is None:  # SQLite stores naive UTC
        at = at.replace(tzinfo=UTC)
    schema_version, data = upcast(type_name, schema_version, data)
    return RecordedEvent(
        position=position,
        stream_type=stream_type,
        stream_id=stream_id,
        version=version,
        type=type_name,
        schema_version=schema_version,
        data=data,
        metadata=meta,
        recorded_at=at,
    )
