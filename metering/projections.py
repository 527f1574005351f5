"""Usage from the allocation events, and budgets from their streams.

``Usage`` is asynchronous (a consumer with its checkpoint, run by ``events consume``, the
demo's threads and ``replay``): a grant opens an ``OpenAllocation``; the first release of it in
log order (``AllocationReleased.ended_at`` where set, else its ``released_at``, or a
``WorkloadPreempted``'s ``recorded_at``) closes it into ``UsageSlice`` rows, one per UTC
day; later releases of the same allocation find nothing open and change nothing. Every
figure comes from the events alone, so a replay equals the live tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection, models

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from metering import events as mev
from metering.intervals import day_slices, from_us, metered, to_us
from metering.models import Budget, BudgetAlert, OpenAllocation, UsageSlice, WorkloadTerms
from scheduler import events as ev

SUBMITTED = ev.WorkloadSubmitted.event_type
GRANTED = ev.AllocationGranted.event_type


# Column orders of the rows the fold writes (and reads back, for open allocations).
TERMS = ("workload_id", "organization_id", "project_id", "cluster_id", "offering", "price_plan")
METERED = (
    "allocation_id",
    "workload_id",
    "organization_id",
    "project_id",
    "cluster_id",
    "offering",
    "price_plan",
    "gpu_model",
    "milli_gpus",
    "granted_at",
)
SLICE = (*METERED, "day", "start_at", "end_at", "milli_gpu_seconds")
Row = tuple[Any, ...]


class Usage(projections.Projection):
    name = "metering.usage"
    batch_size = 5000  # folded into COPY and one query per batch
    models = (WorkloadTerms, OpenAllocation, UsageSlice)

    @handles(
        ev.WorkloadSubmitted, ev.AllocationGranted, ev.WorkloadPreempted, ev.AllocationReleased
    )
    def usage_event(self, event: RecordedEvent) -> None:
        self.apply_batch([event])

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        """Fold the batch in memory, then write it in a few statements: the rows it opens,
        the open rows it closes, and the slices of what it closed."""
        fold = _Fold(list(events))
        _insert(WorkloadTerms, TERMS, list(fold.terms.values()))
        _delete(OpenAllocation, fold.closed_stored)
        _insert(OpenAllocation, METERED, list(fold.opened.values()))
        _insert(UsageSlice, SLICE, fold.slices)


# The tables are read and written by primary key in bulk: on PostgreSQL with ``= ANY`` of
# one array and ``COPY`` (the ORM's statement building costs more than the fold itself);
# through the ORM elsewhere (the embedded default), which also adapts UUIDs for SQLite.


def _select(model: type[models.Model], columns: tuple[str, ...], keys: set[str]) -> list[Row]:
    if not keys:
        return []
    if connection.vendor != "postgresql":
        return list(model._default_manager.filter(pk__in=keys).values_list(*columns))
    pk = model._meta.pk
    assert pk is not None  # noqa: S101 (every model has one)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(columns)} FROM {model._meta.db_table}"  # noqa: S608
            f" WHERE {pk.column} = ANY(%s::uuid[])",
            [list(keys)],
        )
        return list(cursor.fetchall())


def _delete(model: type[models.Model], keys: list[str]) -> None:
    if not keys:
        return
    if connection.vendor != "postgresql":
        model._default_manager.filter(pk__in=keys).delete()
        return
    pk = model._meta.pk
    assert pk is not None  # noqa: S101
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {model._meta.db_table} WHERE {pk.column} = ANY(%s::uuid[])",  # noqa: S608
            [keys],
        )


def _insert(model: type[models.Model], columns: tuple[str, ...], rows: list[Row]) -> None:
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(
            model(**dict(zip(columns, row, strict=True))) for row in rows
        )
        return
    sql = f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)


class _Fold:
    """One batch of usage events applied in position order to what the tables hold."""

    def __init__(self, batch: list[RecordedEvent]) -> None:
        self.terms: dict[str, Row] = {}  # submitted in this batch
        self.opened: dict[str, Row] = {}  # granted in this batch, still open
        self.closed_stored: list[str] = []  # open in the table, closed by this batch
        self.slices: list[Row] = []
        submitted = {e.data["workload_id"] for e in batch if e.type == SUBMITTED}
        granted = {e.data["allocation_id"] for e in batch if e.type == GRANTED}
        wanted_terms = {e.data["workload_id"] for e in batch if e.type == GRANTED} - submitted
        wanted_open = {
            e.data["allocation_id"] for e in batch if e.type not in (SUBMITTED, GRANTED)
        } - granted
        known = {str(row[0]): row for row in _select(WorkloadTerms, TERMS, wanted_terms)}
        self.stored = {str(row[0]): row for row in _select(OpenAllocation, METERED, wanted_open)}
        for event in batch:
            data = event.data
            if event.type == SUBMITTED:
                self.terms[data["workload_id"]] = (
                    data["workload_id"],
                    data["organization_id"],
                    data["project_id"],
                    data["cluster_id"],
                    data["offering"] or "",
                    data["price_plan"],
                )
            elif event.type == GRANTED:
                _, _, _, cluster, offering, plan = (
                    self.terms.get(data["workload_id"]) or known[data["workload_id"]]
                )
                self.opened[data["allocation_id"]] = (
                    data["allocation_id"],
                    data["workload_id"],
                    data["organization_id"],
                    data["project_id"],
                    cluster,
                    offering,
                    plan,
                    data["gpu_model"] or "",
                    sum(len(p["gpus"]) * p["gpu_milli"] for p in data["placements"]),
                    datetime.fromisoformat(data["granted_at"]),
                )
            else:
                self._released(event)

    def _released(self, event: RecordedEvent) -> None:
        allocation_id = event.data["allocation_id"]
        allocation = self.opened.pop(allocation_id, None)
        if allocation is None:
            allocation = self.stored.pop(allocation_id, None)
            if allocation is None:
                return  # released before: the first release wins
            self.closed_stored.append(allocation_id)
        # A failed node's run ended at its last heartbeat (``ended_at``), before its release.
        released = event.data.get("ended_at") or event.data.get("released_at")
        released_us = to_us(datetime.fromisoformat(released) if released else event.recorded_at)
        milli, granted_at = allocation[8], allocation[9]
        granted_us = to_us(granted_at)
        for day, start_us, end_us in day_slices(granted_us, max(released_us, granted_us)):
            self.slices.append(
                (
                    *allocation,
                    day,
                    from_us(start_us),
                    from_us(end_us),
                    metered(milli, granted_us, start_us, end_us),
                )
            )


class Budgets(projections.Projection):
    name = "metering.budgets"
    models = (Budget, BudgetAlert)

    @handles(mev.BudgetSet)
    def budget_set(self, event: RecordedEvent) -> None:
        data = event.data
        Budget.objects.update_or_create(
            id=data["budget_id"],
            defaults={
                "organization_id": data["organization_id"],
                "project_id": data["project_id"],
                "limit_milli_gpu_seconds": data["limit_milli_gpu_seconds"],
                "hard_stop": data["hard_stop"],
                "version": event.version,
                "updated_at": event.recorded_at,
            },
        )

    @handles(mev.BudgetCleared)
    def budget_cleared(self, event: RecordedEvent) -> None:
        Budget.objects.filter(id=event.data["budget_id"]).delete()

    @handles(mev.BudgetThresholdReached)
    def threshold_reached(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        BudgetAlert.objects.create(**data, reached_at=event.recorded_at)
        Budget.objects.filter(id=data["budget_id"]).update(version=event.version)


projections.register(Usage(), synchronous=False)
projections.register(Budgets(), synchronous=True)
