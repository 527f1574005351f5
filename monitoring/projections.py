"""Totals and the admission-wait histogram, folded from the log.

``Counters`` is asynchronous: a consumer whose checkpoint commits in the transaction of the
rows it adds to (``events.consumers``), so every event is counted exactly once however often
the consumer restarts or catches up, and the totals never go backwards when a process does:
they live in the database, not in a process. A replay empties the tables and folds the log
again into the same values.

Admission is Kueue's: the workload got its quota and GPUs (``AllocationGranted``). Its wait is
from its submission, or from its last return to the queue (preempted, or released to retry),
to the grant.
"""

from __future__ import annotations

import bisect
import json
import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from monitoring.models import MetricCounter, MetricHistogram, TrackedWorkload
from scheduler import events as ev
from scheduler.models import FINAL_STATUSES, WorkloadStatus

ADMITTED = "neocloud_admitted_workloads_total"
FINISHED = "neocloud_finished_workloads_total"
PREEMPTED = "neocloud_preempted_workloads_total"
ADMISSION_WAIT = "neocloud_admission_wait_seconds"
# From a second to a week: interactive work admits in seconds, a big gang may wait days.
ADMISSION_WAIT_BUCKETS: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 345600, 604800
)  # fmt: skip

Series = tuple[str, str]  # (name, labels_json)


def labels_json(**labels: str) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


class Counters(projections.Projection):
    name = "monitoring.counters"
    models = (MetricCounter, MetricHistogram, TrackedWorkload)

    @handles(
        ev.WorkloadSubmitted,
        ev.AllocationGranted,
        ev.WorkloadPreempted,
        ev.AllocationReleased,
        ev.WorkloadCancelled,
    )
    def workload_event(self, event: RecordedEvent) -> None:
        self.apply_batch([event])

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        fold = _Fold(list(events))
        fold.write()


class _Fold:
    """A batch folded in memory, then written in a few statements. Read-modify-write is safe
    here: the one consumer of the projection holds its checkpoint's row lock meanwhile."""

    def __init__(self, events: list[RecordedEvent]) -> None:
        ids = {_workload_id(e) for e in events}
        self.tracks = TrackedWorkload.objects.in_bulk(list(ids))
        self.changed: set[uuid.UUID] = set()
        self.counters: dict[Series, float] = defaultdict(float)
        self.waits: dict[str, list[float]] = defaultdict(list)
        for event in events:
            self._apply(event)

    def _apply(self, event: RecordedEvent) -> None:
        data = event.data
        workload_id = _workload_id(event)
        if event.type == ev.WorkloadSubmitted.event_type:
            self.tracks[workload_id] = TrackedWorkload(
                workload_id=workload_id,
                queue=str(data["project_id"]),
                priority_class=str(data["priority_class"]),
                waiting_since=event.recorded_at,
            )
            self.changed.add(workload_id)
            return
        track = self.tracks.get(workload_id)
        if track is None or track.finished:
            return
        self.changed.add(workload_id)
        if event.type == ev.AllocationGranted.event_type:
            self._granted(track, data["allocation_id"], datetime.fromisoformat(data["granted_at"]))
        elif event.type == ev.WorkloadPreempted.event_type:
            if _holds(track, data["allocation_id"]):
                reason = data.get("code") or "unknown"
                self.counters[PREEMPTED, labels_json(queue=track.queue, reason=reason)] += 1
                track.allocation_id, track.waiting_since = None, event.recorded_at
        elif event.type == ev.AllocationReleased.event_type:
            if _holds(track, data["allocation_id"]):
                track.allocation_id = None
                if data["status"] in FINAL_STATUSES:
                    self._finished(track, data["status"])
                elif data["status"] == WorkloadStatus.PENDING:
                    track.waiting_since = datetime.fromisoformat(data["released_at"])
        elif event.type == ev.WorkloadCancelled.event_type:
            self._finished(track, WorkloadStatus.CANCELLED)

    def _granted(self, track: TrackedWorkload, allocation_id: str, at: datetime) -> None:
        if track.waiting_since is None:  # a second grant of one wait: never recorded twice
            return
        waited = max(0.0, (at - track.waiting_since).total_seconds())
        series = labels_json(queue=track.queue, priority_class=track.priority_class)
        self.counters[ADMITTED, series] += 1
        self.waits[series].append(waited)
        track.allocation_id, track.waiting_since = uuid.UUID(str(allocation_id)), None

    def _finished(self, track: TrackedWorkload, outcome: str) -> None:
        self.counters[FINISHED, labels_json(queue=track.queue, outcome=outcome)] += 1
        track.finished, track.waiting_since, track.allocation_id = True, None, None

    def write(self) -> None:
        TrackedWorkload.objects.bulk_create(
            [self.tracks[w] for w in self.changed if w in self.tracks],
            update_conflicts=True,
            unique_fields=["workload_id"],
            update_fields=["queue", "priority_class", "waiting_since", "allocation_id", "finished"],
        )
        self._write_counters()
        self._write_waits()

    def _write_counters(self) -> None:
        if not self.counters:
            return
        names = {name for name, _ in self.counters}
        stored = {
            (c.name, c.labels_json): c
            for c in MetricCounter.objects.filter(name__in=names)
            if (c.name, c.labels_json) in self.counters
        }
        new = []
        for (name, labels), delta in self.counters.items():
            row = stored.get((name, labels))
            if row is None:
                new.append(MetricCounter(name=name, labels_json=labels, value=delta))
            else:
                row.value += delta
        MetricCounter.objects.bulk_update(list(stored.values()), ["value"])
        MetricCounter.objects.bulk_create(new)

    def _write_waits(self) -> None:
        if not self.waits:
            return
        stored = {
            h.labels_json: h
            for h in MetricHistogram.objects.filter(
                name=ADMISSION_WAIT, labels_json__in=list(self.waits)
            )
        }
        new = []
        for labels, observed in self.waits.items():
            row = stored.get(labels)
            if row is None:
                row = MetricHistogram(
                    name=ADMISSION_WAIT,
                    labels_json=labels,
                    counts=[0] * (len(ADMISSION_WAIT_BUCKETS) + 1),
                )
                new.append(row)
            for value in observed:
                # A value on a bound belongs to it (Prometheus' ``le``).
                row.counts[bisect.bisect_left(ADMISSION_WAIT_BUCKETS, value)] += 1
            row.total += sum(observed)
            row.count += len(observed)
        MetricHistogram.objects.bulk_update(list(stored.values()), ["counts", "total", "count"])
        MetricHistogram.objects.bulk_create(new)


def _workload_id(event: RecordedEvent) -> uuid.UUID:
    return uuid.UUID(str(event.data.get("workload_id") or event.stream_id))


def _holds(track: TrackedWorkload, allocation_id: str) -> bool:
    """Only the first end of the allocation the workload holds counts: a preemption and a
    late release of the same run end it once."""
    return track.allocation_id is not None and str(track.allocation_id) == str(allocation_id)


projections.register(Counters(), synchronous=False)
