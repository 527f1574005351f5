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
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from events import projections, wakeup
from events.errors import StreamConflict
from events.models import Event
from events.types import DomainEvent, Payload, deserialize, serialize, upcast

# Any 64-bit constant will do; it only has to be the same for every writer of this database.
APPEND_LOCK_KEY = 0x6E656F636C6F7564  # "neocloud"
TABLE = Event._meta.db_table
COLUMNS = (
    "position, stream_type, stream_id, version, type, schema_version, data, metadata,"
    " recorded_at"
)


_ORGANIZATION = Event._meta.get_field("organization_id")


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
        data.update(self.extra)
        return data


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored, its payload already upcast to the current schema version."""

    position: int
    stream_type: str
    stream_id: str
    version: int
    type: str
    schema_version: int
    data: Payload
    metadata: dict[str, Any]
    recorded_at: datetime

    def payload(self) -> DomainEvent:
        """The typed, validated payload."""
        return deserialize(self.type, self.data)


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
    stream_id = str(stream_id)
    payloads = [serialize(event) for event in events]
    meta = (metadata or Metadata()).as_dict()
    organization_id = meta.get("organization_id")
    now = timezone.now()
    try:
        with transaction.atomic():
            take_append_lock()
            current = stream_version(stream_type, stream_id)
            _check_expected(stream_type, stream_id, expected_version, current)
            recorded = _insert(
                stream_type, stream_id, current, payloads, meta, organization_id, now
            )
            projections.apply_synchronous(recorded)
            wakeup.announce(recorded[-1].position)
    except IntegrityError as exc:
        if "events_stream_version_uniq" not in str(exc):
            raise
        # Only reachable by a writer that bypassed the append lock; the unique key still holds.
        raise StreamConflict(
            stream_type, stream_id, str(expected_version), stream_version(stream_type, stream_id)
        ) from exc
    return recorded


def take_append_lock() -> None:
    """Serialise with every writer until this transaction ends (a no-op on SQLite, where the
    IMMEDIATE transaction already holds the database's write lock)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPEND_LOCK_KEY])


def _check_expected(
    stream_type: str, stream_id: str, expected: int | ExpectedVersion, current: int
) -> None:
    if expected is ANY:
        return
    wanted = 0 if expected is NO_STREAM else expected
    if current != wanted:
        label = "no stream" if expected is NO_STREAM else str(expected)
        raise StreamConflict(stream_type, stream_id, label, current)


def _insert(
    stream_type: str,
    stream_id: str,
    current: int,
    payloads: list[tuple[str, int, Payload]],
    meta: dict[str, Any],
    organization_id: str | None,
    now: datetime,
) -> list[RecordedEvent]:
    ops = connection.ops
    json_cast = "::jsonb" if connection.vendor == "postgresql" else ""
    row = f"(%s, %s, %s, %s, %s, %s{json_cast}, %s{json_cast}, %s, %s)"
    meta_json = json.dumps(meta)
    org = _ORGANIZATION.get_db_prep_value(organization_id, connection) if organization_id else None
    stamp = ops.adapt_datetimefield_value(now)
    params: list[Any] = []
    for offset, (type_name, schema_version, data) in enumerate(payloads, start=1):
        params += [
            stream_type,
            stream_id,
            current + offset,
            type_name,
            schema_version,
            json.dumps(data),
            meta_json,
            org,
            stamp,
        ]
    sql = (
        f"INSERT INTO {TABLE} (stream_type, stream_id, version, type, schema_version, data,"  # noqa: S608
        f" metadata, organization_id, recorded_at) VALUES {', '.join([row] * len(payloads))}"
        " RETURNING position"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        positions = sorted(r[0] for r in cursor.fetchall())
    return [
        RecordedEvent(
            position=position,
            stream_type=stream_type,
            stream_id=stream_id,
            version=current + offset,
            type=type_name,
            schema_version=schema_version,
            data=data,
            metadata=meta,
            recorded_at=now,
        )
        for offset, (position, (type_name, schema_version, data)) in enumerate(
            zip(positions, payloads, strict=True), start=1
        )
    ]


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
