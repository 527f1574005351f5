"""Usage from the allocation events, and budgets from their streams.

``Usage`` is asynchronous (a consumer with its checkpoint, run by ``events consume``, the
demo's threads and ``replay``): a grant opens an ``OpenAllocation``; the first release of it in
log order (``AllocationReleased.released_at``, or a ``WorkloadPreempted``'s ``recorded_at``)
closes it into ``UsageSlice`` rows, one per UTC day; later releases of the same allocation
find nothing open and change nothing. Every figure comes from the events alone, so a replay
equals the live tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from events import projections
from events.projections import handles
from events.store import RecordedEvent
from metering import events as mev
from metering.intervals import day_slices, from_us, metered, to_us
from metering.models import Budget, BudgetAlert, OpenAllocation, UsageSlice, WorkloadTerms
from scheduler import events as ev

SUBMITTED = ev.WorkloadSubmitted.event_type
GRANTED = ev.AllocationGranted.event_type


class Usage(projections.Projection):
    name = "metering.usage"
    models = (WorkloadTerms, OpenAllocation, UsageSlice)

    @handles(
        ev.WorkloadSubmitted, ev.AllocationGranted, ev.WorkloadPreempted, ev.AllocationReleased
    )
    def usage_event(self, event: RecordedEvent) -> None:
        self.apply_batch([event])

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        """Fold the batch in memory, then write it in a few statements: the rows it opens,
        the open rows it closes, and the slices of what it closed."""
        batch = list(events)
        fold = _Fold(batch)
        WorkloadTerms.objects.bulk_create(fold.terms.values())
        if fold.closed_stored:
            OpenAllocation.objects.filter(allocation_id__in=fold.closed_stored).delete()
        OpenAllocation.objects.bulk_create(fold.opened.values())
        UsageSlice.objects.bulk_create(fold.slices)


class _Fold:
    """One batch of usage events applied in position order to what the tables hold."""

    def __init__(self, batch: list[RecordedEvent]) -> None:
        self.terms: dict[str, WorkloadTerms] = {}  # submitted in this batch
        self.opened: dict[str, OpenAllocation] = {}  # granted in this batch, still open
        self.closed_stored: list[str] = []  # open in the table, closed by this batch
        self.slices: list[UsageSlice] = []
        submitted = {e.data["workload_id"] for e in batch if e.type == SUBMITTED}
        granted = {e.data["allocation_id"] for e in batch if e.type == GRANTED}
        known = {
            str(t.workload_id): t
            for t in WorkloadTerms.objects.filter(
                workload_id__in={e.data["workload_id"] for e in batch if e.type == GRANTED}
                - submitted
            )
        }
        self.stored = {
            str(a.allocation_id): a
            for a in OpenAllocation.objects.filter(
                allocation_id__in={
                    e.data["allocation_id"] for e in batch if e.type not in (SUBMITTED, GRANTED)
                }
                - granted
            )
        }
        for event in batch:
            if event.type == SUBMITTED:
                self._submitted(event)
            elif event.type == GRANTED:
                self._granted(event, known)
            else:
                self._released(event)

    def _submitted(self, event: RecordedEvent) -> None:
        data = event.data
        self.terms[data["workload_id"]] = WorkloadTerms(
            workload_id=data["workload_id"],
            organization_id=data["organization_id"],
            project_id=data["project_id"],
            cluster_id=data["cluster_id"],
            offering=data["offering"] or "",
            price_plan=data["price_plan"],
        )

    def _granted(self, event: RecordedEvent, known: dict[str, WorkloadTerms]) -> None:
        data = event.data
        terms = self.terms.get(data["workload_id"]) or known[data["workload_id"]]
        self.opened[data["allocation_id"]] = OpenAllocation(
            allocation_id=data["allocation_id"],
            workload_id=data["workload_id"],
            organization_id=data["organization_id"],
            project_id=data["project_id"],
            cluster_id=terms.cluster_id,
            offering=terms.offering,
            price_plan=terms.price_plan,
            gpu_model=data["gpu_model"] or "",
            milli_gpus=sum(len(p["gpus"]) * p["gpu_milli"] for p in data["placements"]),
            granted_at=datetime.fromisoformat(data["granted_at"]),
        )

    def _released(self, event: RecordedEvent) -> None:
        allocation_id = event.data["allocation_id"]
        allocation = self.opened.pop(allocation_id, None)
        if allocation is None:
            allocation = self.stored.pop(allocation_id, None)
            if allocation is None:
                return  # released before: the first release wins
            self.closed_stored.append(allocation_id)
        released = event.data.get("released_at")
        released_us = to_us(datetime.fromisoformat(released) if released else event.recorded_at)
        granted_us = to_us(allocation.granted_at)
        for day, start_us, end_us in day_slices(granted_us, max(released_us, granted_us)):
            self.slices.append(
                UsageSlice(
                    allocation_id=allocation.allocation_id,
                    workload_id=allocation.workload_id,
                    organization_id=allocation.organization_id,
                    project_id=allocation.project_id,
                    cluster_id=allocation.cluster_id,
                    offering=allocation.offering,
                    price_plan=allocation.price_plan,
                    gpu_model=allocation.gpu_model,
                    milli_gpus=allocation.milli_gpus,
                    granted_at=allocation.granted_at,
                    day=day,
                    start_at=from_us(start_us),
                    end_at=from_us(end_us),
                    milli_gpu_seconds=metered(allocation.milli_gpus, granted_us, start_us, end_us),
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
