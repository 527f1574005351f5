"""The scheduling tables, kept from the scheduling streams inside each append.

Releases race: a run may end while the scheduler preempts it. The log orders them, and the
first release of an allocation wins; a later one is recorded in the log and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection, models
from django.db.models import BooleanField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from scheduler import events as ev
from scheduler.models import (
    FINAL_STATUSES,
    Allocation,
    PriorityClass,
    Queue,
    Reservation,
    ReservationStatus,
    Workload,
    WorkloadStatus,
)


class Scheduling(projections.Projection):
    name = "scheduler.scheduling"
    models = (PriorityClass, Queue, Reservation, Workload, Allocation)

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        """A cycle appends hundreds of admissions and grants at once: each run of them is
        applied in a few statements (inside the append, which holds the log's lock)."""
        run: list[RecordedEvent] = []
        for event in events:
            if run and event.type != run[0].type:
                self._apply_run(run)
                run = []
            run.append(event)
        if run:
            self._apply_run(run)

    def _apply_run(self, run: list[RecordedEvent]) -> None:
        if run[0].type == ev.WorkloadAdmitted.event_type:
            Workload.objects.filter(
                id__in=[e.data["workload_id"] for e in run], status=WorkloadStatus.PENDING
            ).update(status=WorkloadStatus.ADMITTED, status_reason="")
        elif run[0].type == ev.AllocationGranted.event_type:
            self._granted(run)
        elif run[0].type == ev.WorkloadSubmitted.event_type and len(run) > 1:
            # A batch's or an array's workloads, appended together.
            Workload.objects.bulk_create([_submitted_row(e) for e in run], batch_size=1000)
        elif run[0].type == ev.WorkloadProvisioning.event_type and len(run) > 1:
            self._statements(_PROVISIONING_SQL, run, lambda e: (_uuid(e.data["allocation_id"]),))
        elif run[0].type == ev.WorkloadRunning.event_type and len(run) > 1:
            self._statements(
                _RUNNING_SQL,
                run,
                lambda e: (_uuid(e.data["allocation_id"]),) * 2 + (_time(e.data["started_at"]),),
            )
        else:
            for event in run:
                self.apply(event)

    @staticmethod
    def _statements(
        sql: str, run: list[RecordedEvent], values: Callable[[RecordedEvent], tuple[Any, ...]]
    ) -> None:
        """One statement per event of the run, sent together: a batch of runs' starts
        (``runs_provisioning``, ``runs_started``) recorded as the handlers would record each,
        with its stream's version."""
        with connection.cursor() as cursor:
            cursor.executemany(sql, [(*values(e), e.version, _uuid(e.stream_id)) for e in run])

    @handles(ev.PriorityClassDefined)
    def priority_class_defined(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        PriorityClass.objects.update_or_create(name=data.pop("name"), defaults=data)

    @handles(ev.QueueConfigured)
    def queue_configured(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        Queue.objects.update_or_create(
            project_id=data.pop("project_id"),
            defaults={**data, "version": event.version},
        )

    @handles(ev.WorkloadSubmitted)
    def workload_submitted(self, event: RecordedEvent) -> None:
        _submitted_row(event).save(force_insert=True)

    @handles(ev.WorkloadCancelRequested)
    def cancel_requested(self, event: RecordedEvent) -> None:
        Workload.objects.filter(id=event.stream_id).update(
            cancel_requested=True, version=event.version
        )

    @handles(ev.WorkloadAdmitted)
    def admitted(self, event: RecordedEvent) -> None:
        Workload.objects.filter(id=event.data["workload_id"], status=WorkloadStatus.PENDING).update(
            status=WorkloadStatus.ADMITTED, status_reason=""
        )

    @handles(ev.AllocationGranted)
    def granted(self, event: RecordedEvent) -> None:
        self._granted([event])

    def _granted(self, run: list[RecordedEvent]) -> None:
        Allocation.objects.bulk_create(
            Allocation(
                id=e.data["allocation_id"],
                workload_id=e.data["workload_id"],
                organization_id=e.data["organization_id"],
                project_id=e.data["project_id"],
                cluster_id=e.stream_id,
                gpu_model=e.data["gpu_model"] or "",
                placements=e.data["placements"],
                gpu_milli=sum(len(p["gpus"]) * p["gpu_milli"] for p in e.data["placements"]),
                granted_at=e.data["granted_at"],
            )
            for e in run
        )
        # One statement per grant, sent together (a bulk_update's CASE costs more to build).
        pk = Workload._meta.pk
        assert pk is not None  # noqa: S101 (every model has one)
        with connection.cursor() as cursor:
            cursor.executemany(
                _GRANTED_SQL,
                [
                    (
                        pk.get_db_prep_value(uuid.UUID(str(e.data["allocation_id"])), connection),
                        pk.get_db_prep_value(uuid.UUID(str(e.data["workload_id"])), connection),
                    )
                    for e in run
                ],
            )

    @handles(ev.WorkloadPreempted)
    def preempted(self, event: RecordedEvent) -> None:
        data = event.data
        if not _release(data["allocation_id"], event, "preempted"):
            return
        Workload.objects.filter(
            id=data["workload_id"], allocation_id=data["allocation_id"]
        ).exclude(status__in=FINAL_STATUSES).update(
            status=WorkloadStatus.PENDING,
            status_reason=f"preempted: {data['reason']}"[:300],
            allocation_id=None,
            started_at=None,
            endpoints=[],
            preemptions=F("preemptions") + 1,
        )

    @handles(ev.WorkloadProvisioning)
    def provisioning(self, event: RecordedEvent) -> None:
        Workload.objects.filter(
            id=event.stream_id,
            allocation_id=event.data["allocation_id"],
            status=WorkloadStatus.SCHEDULED,
        ).update(status=WorkloadStatus.PROVISIONING)
        Workload.objects.filter(id=event.stream_id).update(version=event.version)

    @handles(ev.WorkloadRunning)
    def running(self, event: RecordedEvent) -> None:
        Workload.objects.filter(
            id=event.stream_id,
            allocation_id=event.data["allocation_id"],
            status__in=[WorkloadStatus.SCHEDULED, WorkloadStatus.PROVISIONING],
        ).update(status=WorkloadStatus.RUNNING, started_at=event.data["started_at"])
        Workload.objects.filter(id=event.stream_id).update(version=event.version)

    @handles(ev.WorkloadEndpointsReported)
    def endpoints_reported(self, event: RecordedEvent) -> None:
        Workload.objects.filter(
            id=event.stream_id, allocation_id=event.data["allocation_id"]
        ).update(endpoints=event.data["endpoints"])
        Workload.objects.filter(id=event.stream_id).update(version=event.version)

    @handles(ev.AllocationReleased)
    def released(self, event: RecordedEvent) -> None:
        data = event.data
        if _release(data["allocation_id"], event, data["reason"]):
            workload = Workload.objects.get(id=event.stream_id)
            if workload.allocation_id is not None and str(workload.allocation_id) == str(
                data["allocation_id"]
            ):
                workload.status = data["status"]
                workload.status_reason = data["message"][:300]
                workload.allocation_id = None
                workload.started_at = None
                workload.endpoints = []  # the run that served them ended
                if data["reason"] in {"failed", "max_runtime", "node_failure", "lost"}:
                    workload.failures += 1
                if workload.status in FINAL_STATUSES:
                    workload.finished_at = data["released_at"]
                workload.save()
        Workload.objects.filter(id=event.stream_id).update(version=event.version)

    @handles(ev.WorkloadCancelled)
    def cancelled(self, event: RecordedEvent) -> None:
        Workload.objects.filter(id=event.stream_id).update(
            status=WorkloadStatus.CANCELLED,
            status_reason=event.data["reason"][:300],
            finished_at=event.recorded_at,
            version=event.version,
        )

    # --- Preemption with notice (issue 32) ---
    @handles(ev.RunNoticeGiven)
    def notice_given(self, event: RecordedEvent) -> None:
        Workload.objects.filter(id=event.stream_id).update(version=event.version)

    @handles(ev.ReservationCreated)
    def reservation_created(self, event: RecordedEvent) -> None:
        data = dict(event.data)
        data["id"] = data.pop("reservation_id")
        data["offering"] = data["offering"] or ""
        Reservation.objects.create(
            **data,
            status=ReservationStatus.ACTIVE,
            created_at=event.recorded_at,
            version=event.version,
        )

    @handles(ev.ReservationCancelled)
    def reservation_cancelled(self, event: RecordedEvent) -> None:
        charged = event.data.get("charged")
        Reservation.objects.filter(id=event.stream_id).update(
            status=ReservationStatus.CANCELLED,
            cancelled_at=Coalesce(F("cancelled_at"), Value(event.recorded_at)),
            cancellation_charged=Coalesce(
                F("cancellation_charged"),
                Value(charged)
                if charged is not None
                else ExpressionWrapper(
                    Q(starts_at__lt=Value(event.recorded_at)), output_field=BooleanField()
                ),
            ),
            version=event.version,
        )


# A workload that ended before its grant was applied keeps its final status (its run gives
# the GPUs back). The statuses are the enum's constants, not input.
_FINAL_SQL = ", ".join(f"'{status}'" for status in sorted(FINAL_STATUSES))
_GRANTED_SQL = (
    "UPDATE scheduler_workload SET allocation_id = %s, runs = runs + 1, started_at = NULL,"  # noqa: S608
    f" status = CASE WHEN status IN ({_FINAL_SQL}) THEN status"
    f" ELSE '{WorkloadStatus.SCHEDULED}' END,"
    f" status_reason = CASE WHEN status IN ({_FINAL_SQL}) THEN status_reason ELSE '' END"
    " WHERE id = %s"
)


# As the handlers ``provisioning`` and ``running``, in one statement each.
def _uuid(value: str) -> Any:
    """An id as this database's UUID column takes it (PostgreSQL's uuid, SQLite's hex)."""
    return UUID_FIELD.get_db_prep_value(uuid.UUID(value), connection)


def _time(value: str) -> Any:
    """An event's time as this database's datetime column takes it."""
    return TIME_FIELD.get_db_prep_value(parse_datetime(value), connection)


UUID_FIELD = models.UUIDField()
TIME_FIELD = models.DateTimeField()
# Portable SQL: the values come prepared for the database (``_uuid``, ``_time``), no casts.
_PROVISIONING_SQL = (
    "UPDATE scheduler_workload SET"  # noqa: S608
    " status = CASE WHEN allocation_id = %s"
    f" AND status = '{WorkloadStatus.SCHEDULED}' THEN '{WorkloadStatus.PROVISIONING}'"
    " ELSE status END, version = %s WHERE id = %s"
)
_STARTABLE_SQL = f"('{WorkloadStatus.SCHEDULED}', '{WorkloadStatus.PROVISIONING}')"
_RUNNING_SQL = (
    "UPDATE scheduler_workload SET"  # noqa: S608
    f" status = CASE WHEN allocation_id = %s AND status IN {_STARTABLE_SQL}"
    f" THEN '{WorkloadStatus.RUNNING}' ELSE status END,"
    f" started_at = CASE WHEN allocation_id = %s AND status IN {_STARTABLE_SQL}"
    " THEN %s ELSE started_at END,"
    " version = %s WHERE id = %s"
)


def _submitted_row(event: RecordedEvent) -> Workload:
    """The row a ``WorkloadSubmitted`` makes, unsaved."""
    data = dict(event.data)
    data["id"] = data.pop("workload_id")
    data["offering"] = data["offering"] or ""
    # Older events have no program: the row's defaults stand in.
    data["image"] = data.get("image") or ""
    data["working_dir"] = data.get("working_dir") or ""
    return Workload(
        **data,
        status=WorkloadStatus.PENDING,
        submitted_at=event.recorded_at,
        version=event.version,
    )


def _release(allocation_id: str, event: RecordedEvent, reason: str) -> bool:
    """Close the allocation unless an earlier release did; whether this one did."""
    return bool(
        Allocation.objects.filter(id=allocation_id, released_at__isnull=True).update(
            released_at=event.data.get("released_at") or event.recorded_at,
            release_reason=reason,
        )
    )


projections.register(Scheduling(), synchronous=True)
