"""Execution writes: a run's assignments, the reports of the agents running them, and their
output.

Lock order (``neocloud.core.transactions``): the assignments' rows (or their outputs'),
by id, then the log's append lock; after it, a ``ports`` report's workload row
(``scheduler.services``). A report's run is checked once the report commits, so a run ends
as soon as its last assignment does.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from events import store, wakeup
from execution import events as ev
from execution.errors import UnknownAllocation, UnknownAssignment
from execution.models import Assignment, AssignmentOutput, LogChunk
from inventory.models import Node
from neocloud.core.transactions import row_lock
from scheduler import runs
from scheduler import services as scheduler
from scheduler.models import Allocation, Workload
from tenants.access import Actor

logger = logging.getLogger(__name__)

ENDS = frozenset({"exited", "start_failed"})


# --- a run's assignments ---------------------------------------------------------------------


def assignments_create(*, actor: Actor, allocation_id: uuid.UUID) -> list[Assignment]:
    """One assignment per placement of the allocation (rank: the placement's place), once:
    for an allocation that has them already, nothing new. Two at once: the second's append
    finds the run's stream made, and its retry finds the rows."""
    existing = list(Assignment.objects.filter(allocation_id=allocation_id).order_by("rank"))
    if existing:
        return existing
    allocation = Allocation.objects.filter(pk=allocation_id).first()
    if allocation is None:
        raise UnknownAllocation(f"no allocation {allocation_id}")
    parts = [
        ev.AssignmentData(
            assignment_id=uuid.uuid4(),
            node_id=placement["node_id"],
            node=placement["node"],
            rank=rank,
            gpus=list(placement["gpus"]),
        )
        for rank, placement in enumerate(allocation.placements)
    ]
    store.append(
        ev.RUN_STREAM,
        str(allocation_id),
        [
            ev.AssignmentsCreated(
                allocation_id=allocation.pk,
                workload_id=allocation.workload_id,
                organization_id=allocation.organization_id,
                project_id=allocation.project_id,
                assignments=parts,
            )
        ],
        expected_version=store.NO_STREAM,
        metadata=actor.metadata(allocation.organization_id),
    )
    AssignmentOutput.objects.bulk_create(
        AssignmentOutput(assignment_id=p.assignment_id, workload_id=allocation.workload_id)
        for p in parts
    )
    return list(Assignment.objects.filter(allocation_id=allocation_id).order_by("rank"))


# --- reports ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """One report of an agent (PROTOCOL §3): the event it becomes, for one assignment."""

    assignment_id: uuid.UUID
    event: ev.AssignmentReported


@dataclass(frozen=True)
class Applied:
    applied: list[tuple[uuid.UUID, int]]
    duplicates: list[tuple[uuid.UUID, int]]


def _owned(node: Node, ids: set[uuid.UUID], rows: dict[uuid.UUID, Assignment], name: str) -> None:
    unknown = sorted(str(i) for i in ids if i not in rows or rows[i].node_id != node.pk)
    if unknown:
        raise UnknownAssignment(
            f"not assignments of node {node.name}: {', '.join(unknown)}",
            fields={name: [f"unknown assignment {i}" for i in unknown]},
        )


def reports_apply(*, actor: Actor, node: Node, reports: Sequence[Report]) -> Applied:
    """Apply a batch of reports in order, atomically. ``(assignment, seq)`` is the
    idempotency key: a seq at or below the last applied is a duplicate, acknowledged with no
    effect. The assignments' rows are locked (by id) first, so two deliveries of one batch
    at once have one effect: the second reads what the first committed."""
    ids = {r.assignment_id for r in reports}
    rows = {a.pk: a for a in row_lock(Assignment.objects.filter(pk__in=ids).order_by("pk"))}
    _owned(node, ids, rows, "reports")
    last_seq = {pk: a.last_seq for pk, a in rows.items()}
    changes: dict[uuid.UUID, list[ev.AssignmentReported]] = {}
    applied, duplicates = [], []
    ports: dict[uuid.UUID, list[dict[str, object]]] = {}
    for report in reports:
        event = report.event
        key = (report.assignment_id, event.seq)
        if event.seq <= last_seq[report.assignment_id]:
            duplicates.append(key)
            continue
        last_seq[report.assignment_id] = event.seq
        applied.append(key)
        changes.setdefault(report.assignment_id, []).append(event)
        if event.kind == "ports":
            ports[report.assignment_id] = [p.model_dump() for p in event.ports]
    for assignment_id, events in changes.items():
        assignment = rows[assignment_id]
        store.append(
            ev.ASSIGNMENT_STREAM,
            str(assignment_id),
            events,
            expected_version=assignment.version,
            metadata=actor.metadata(assignment.organization_id),
        )
    for assignment_id, reported in ports.items():
        _endpoints_set(actor, node, rows[assignment_id], reported)
    ended = sorted(
        {
            (rows[i].workload_id, rows[i].allocation_id)
            for i, events in changes.items()
            if any(e.kind in ENDS for e in events)
        }
    )
    if ended:
        transaction.on_commit(lambda: _runs_check(ended), robust=True)
    return Applied(applied=applied, duplicates=duplicates)


def _endpoints_set(
    actor: Actor, node: Node, assignment: Assignment, reported: list[dict[str, object]]
) -> None:
    """This node's endpoints replace the ones it reported before (a report of a run that is
    over changes nothing)."""
    workload = Workload.objects.filter(pk=assignment.workload_id).first()
    if workload is None:
        return
    mine: list[dict[str, object]] = [
        {"port": p["port"], "address": p["address"], "node": node.name, "kind": p["kind"]}
        for p in reported
    ]
    scheduler.workload_endpoints_set(
        actor=actor, workload=workload, endpoints=mine, allocation_id=assignment.allocation_id
    )


def _runs_check(pairs: list[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Once an end commits: the run succeeded, failed, or goes on; the workloads' followers
    learn whether their output is complete."""
    runs.runs_check(pairs)
    for workload_id in sorted({w for w, _ in pairs}):
        wakeup.notify(wakeup.OUTPUT_CHANNEL, str(workload_id))


# --- output ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    assignment_id: uuid.UUID
    offset: int
    data: bytes


def logs_append(
    *,
    node: Node,
    chunks: Sequence[Chunk],
    dropped: Sequence[tuple[uuid.UUID, int]],
) -> dict[uuid.UUID, int]:
    """Store what extends each assignment's contiguous output, and where each of the
    request's assignments is to ship from next.

    A chunk wholly below the high-water mark was stored before; one straddling it stores its
    new tail; one past it (a gap) is not stored, and the answer tells the agent to rewind.
    Past the workload's ``LOG_MAX_BYTES_PER_WORKLOAD`` the mark still moves but nothing is
    stored (``truncated_bytes``). The outputs of every workload the request touches are
    locked (by id): the cap is the workload's, whichever node writes."""
    ids = {c.assignment_id for c in chunks} | {i for i, _ in dropped}
    assignments = Assignment.objects.in_bulk(ids)
    _owned(node, ids, assignments, "chunks" if chunks else "dropped")
    workloads = {a.workload_id for a in assignments.values()}
    missing = ids - set(AssignmentOutput.objects.filter(pk__in=ids).values_list("pk", flat=True))
    AssignmentOutput.objects.bulk_create(  # made with their assignments; this only mends
        [
            AssignmentOutput(assignment_id=i, workload_id=assignments[i].workload_id)
            for i in missing
        ],
        ignore_conflicts=True,
    )
    outputs = {
        o.assignment_id: o
        for o in row_lock(AssignmentOutput.objects.filter(workload_id__in=workloads).order_by("pk"))
    }
    stored = {w: 0 for w in workloads}
    for output in outputs.values():
        stored[output.workload_id] += output.stored_bytes
    cap = int(settings.LOG_MAX_BYTES_PER_WORKLOAD)
    new: list[LogChunk] = []
    for chunk in chunks:
        output = outputs[chunk.assignment_id]
        end = chunk.offset + len(chunk.data)
        if end <= output.next_offset or chunk.offset > output.next_offset:
            continue  # a duplicate, or past a gap
        tail = chunk.data[output.next_offset - chunk.offset :]
        kept = tail[: max(0, cap - stored[output.workload_id])]
        if kept:
            new.append(
                LogChunk(assignment_id=chunk.assignment_id, offset=output.next_offset, data=kept)
            )
        stored[output.workload_id] += len(kept)
        output.stored_bytes += len(kept)
        output.truncated_bytes += len(tail) - len(kept)
        output.next_offset = end
    for assignment_id, total in dropped:
        output = outputs[assignment_id]
        output.dropped_bytes = max(output.dropped_bytes, total)
    LogChunk.objects.bulk_create(new)
    for workload_id in sorted({assignments[c.assignment_id].workload_id for c in new}):
        wakeup.notify(wakeup.OUTPUT_CHANNEL, str(workload_id))  # its followers read them
    touched = [outputs[i] for i in ids]
    AssignmentOutput.objects.bulk_update(
        touched, ["next_offset", "stored_bytes", "truncated_bytes", "dropped_bytes"]
    )
    return {i: outputs[i].next_offset for i in ids}
