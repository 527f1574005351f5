"""Submitting many workloads in one request: a job array (one spec run ``count`` times, each
task told its index, as Slurm's ``--array``) or a list of specs.

All or nothing: every item passes the checks of ``workload_submit`` (``check_submission``,
reused as it is) before anything is written, then all the workloads are appended together
(``store.append_new_streams``: one append lock, one INSERT, one pass of the projections). A
refused item refuses the batch and nothing is written. The rules are those of submitting the
items one by one, no more and no fewer: each item is checked against the fleet, its quota
(a workload larger than the quota could never start; work beyond the quota waits in the
queue, as it would submitted alone) and the approval threshold.

An array is one spec, so its checks run once and their refusal is the single submission's
own error; a list's refusals are gathered into one ``BatchRefused`` naming each item.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from events import store
from neocloud.core.errors import ApplicationError
from scheduler import events as ev
from scheduler import triggers
from scheduler.errors import BatchRefused
from scheduler.services.shape import invalid
from scheduler.services.standing import check_waiting
from scheduler.services.submission import check_submission
from scheduler.specs import WorkloadSpec
from tenants.access import Actor
from tenants.models import Organization, Project

MAX_BATCH = 10_000  # workloads in one request: one transaction holds the log's lock for all


@dataclass(frozen=True)
class ItemProblem:
    """Why one item of a batch is refused: its index, the field and the error's code."""

    item: int
    field: str | None
    code: str
    message: str

    def as_dict(self) -> dict[str, object]:
        return {"item": self.item, "field": self.field, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class SubmittedBatch:
    """What a batch submitted, in the order asked; ``array_id`` for an array."""

    array_id: uuid.UUID | None
    workloads: list[ev.WorkloadSubmitted]


def workload_submit_array(
    *,
    actor: Actor,
    project: Project,
    spec: WorkloadSpec,
    count: int,
    order_id: uuid.UUID | None = None,
) -> SubmittedBatch:
    """Queue ``count`` workloads of ``spec`` as one array: the checks of ``workload_submit``
    once (the tasks are alike), then one append of all. Each task carries the array's id, its
    index and the count, which its runs see as ``NEOCLOUD_ARRAY_*``."""
    check_batch_size(count, "array.count")
    first = check_submission(
        actor=actor, project=project, spec=spec, order_id=order_id, copies=count
    )
    array_id = uuid.uuid4()
    tasks = [
        first.model_copy(
            update={
                "workload_id": first.workload_id if index == 0 else uuid.uuid4(),
                "array_id": array_id,
                "array_index": index,
                "array_count": count,
            }
        )
        for index in range(count)
    ]
    _append(actor, tasks)
    return SubmittedBatch(array_id=array_id, workloads=tasks)


def workload_submit_batch(
    *, actor: Actor, items: Sequence[tuple[Project, WorkloadSpec]]
) -> SubmittedBatch:
    """Queue every ``(project, spec)`` of ``items``, or none: each passes the checks of
    ``workload_submit``; any refusal raises ``BatchRefused`` naming every refused item."""
    check_batch_size(len(items), "items")
    submitted: list[ev.WorkloadSubmitted] = []
    problems: list[ItemProblem] = []
    organization_id = items[0][0].organization_id
    for index, (project, spec) in enumerate(items):
        if project.organization_id != organization_id:
            # The log files a batch's events under one organization, so it holds one.
            message = "a batch's projects are of one organization, as its first item's"
            problems.append(ItemProblem(index, "project", "other_organization", message))
            continue
        try:
            submitted.append(
                check_submission(actor=actor, project=project, spec=spec, waiting=False)
            )
        except ApplicationError as error:
            problems += item_problems(index, error)
    if problems:
        raise batch_refused(problems)
    _check_waiting(items)
    _append(actor, submitted)
    return SubmittedBatch(array_id=None, workloads=submitted)


def _check_waiting(items: Sequence[tuple[Project, WorkloadSpec]]) -> None:
    """The waiting bound over the whole list: each project's items, and all of them for the
    organization."""
    organization = Organization.objects.get(pk=items[0][0].organization_id)
    adding = Counter(project for project, _ in items)
    check_waiting(organization=organization, adding=adding)


def check_batch_size(count: int, field: str) -> None:
    if not 1 <= count <= MAX_BATCH:
        raise invalid(field, f"a batch is 1 to {MAX_BATCH} workloads, not {count}", "out_of_range")


def item_problems(index: int, error: ApplicationError) -> list[ItemProblem]:
    """One problem per field the error names (one without a field if it names none)."""
    if not error.fields:
        return [ItemProblem(index, None, error.code, error.message)]
    return [ItemProblem(index, field, error.code, error.message) for field in error.fields]


def batch_refused(problems: Sequence[ItemProblem]) -> BatchRefused:
    items = sorted({p.item for p in problems})
    return BatchRefused(
        f"{len(items)} item(s) refused (first: item {items[0]}); nothing was submitted",
        details={"errors": [p.as_dict() for p in problems]},
    )


def _append(actor: Actor, submitted: list[ev.WorkloadSubmitted]) -> None:
    """One append for every workload of the batch (each a new stream), then a cycle of each
    cluster they went to, once it commits. A batch is one organization's: the API checks
    each item's project against the caller, and an actor writes for one organization."""
    store.append_new_streams(
        ev.WORKLOAD_STREAM,
        [(str(w.workload_id), [w]) for w in submitted],
        metadata=actor.metadata(submitted[0].organization_id),
    )
    for cluster_id in dict.fromkeys(w.cluster_id for w in submitted):
        triggers.cycle_wanted(cluster_id)
