"""Workloads: a page of the list under its filters; one workload as its page shows it (its
state beside its row, the status timeline from its stream in plain words, the placement per
node with every GPU of the node, its runs' assignments and output). The scheduler's and the
execution app's selectors do the reading; this module only arranges what they return."""

from __future__ import annotations

import re
import shlex
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from console.guard import Console
from events.models import Event
from execution import selectors as execution
from execution.models import Assignment
from inventory.models import Gpu, GpuModel
from scheduler import selectors as scheduling
from scheduler.engine.forecast import Basis
from scheduler.models import (
    FINAL_STATUSES,
    WAITING_STATUSES,
    Allocation,
    Workload,
    WorkloadEstimate,
    WorkloadStatus,
)
from tenants.access import Action
from tenants.models import Project

PAGE_SIZE = 50
LOG_CHUNKS = 500  # a page's or a poll's worth of output chunks; the next poll reads on


@dataclass(frozen=True)
class Filters:
    project: uuid.UUID | None = None
    status: str = ""
    gpu_model: str = ""


def filter_choices(console: Console) -> tuple[list[Project], list[GpuModel]]:
    """The projects the member sees in the current organization, and the fleet's models."""
    projects = console.scoped(Project.objects.all(), Action.PROJECT_READ).order_by("name")
    return list(projects), list(GpuModel.objects.order_by("slug"))


def workload_page(console: Console, filters: Filters, number: str | None) -> Page[Workload]:
    """Newest first, ``PAGE_SIZE`` a page. The model filter keeps work that asked for the
    model (among its preferences) or was placed on it."""
    rows = console.scoped(Workload.objects.all(), Action.WORKLOAD_READ)
    if filters.project is not None:
        rows = rows.filter(project_id=filters.project)
    if filters.status:
        rows = rows.filter(status=filters.status)
    if filters.gpu_model:
        placed = Allocation.objects.filter(workload_id=OuterRef("pk"), gpu_model=filters.gpu_model)
        # The list's JSON as text, element by element in quotes: one portable lookup for
        # PostgreSQL and the embedded SQLite, which has no JSON containment. Slugs hold no
        # quote.
        asked = Q(gpu_models__icontains=f'"{filters.gpu_model}"')
        rows = rows.filter(asked | Q(Exists(placed)))
    rows = rows.select_related("project").order_by("-submitted_at", "-pk")
    return Paginator(rows, PAGE_SIZE).get_page(number)


@dataclass(frozen=True)
class StartShown:
    """A waiting workload's estimated start in the pages' words: ``line`` ("starts in about
    40 min (20 min to 1 h 10)", "can never start: ...") and what it rests on (``basis``)."""

    line: str
    basis: str
    never: bool
    estimated_at: datetime


def start_shown(workload: Workload, estimate: WorkloadEstimate, now: datetime) -> StartShown:
    basis = set(estimate.basis)
    never = Basis.NEVER in basis
    start, earliest, latest = estimate.estimated_start, estimate.earliest, estimate.latest
    if never:
        line = "can never start: nothing in this cluster could ever hold it"
    elif start is None:
        line = "not expected to start within the next 7 days"
    elif Basis.NOW in basis:
        line = "should start in the next cycle"
    elif start <= now:
        # The work ahead runs longer than expected: the next refresh moves the estimate out.
        line = f"expected by {start:%H:%M} UTC, but the work ahead is running longer"
    else:
        line = f"starts in about {_span(start - now)}"
        if earliest is not None:
            late = _span(latest - now) if latest is not None else "more than 7 days"
            line += f" ({_span(earliest - now)} \N{EN DASH} {late})"
    message = scheduling.estimate_message(workload, estimate)
    return StartShown(line, message, never, estimate.computed_at)


def _span(delta: timedelta) -> str:
    """A duration as a person reads it: "under a minute", "40 min", "1 h 10", "2 d 3 h"."""
    minutes = round(max(0.0, delta.total_seconds()) / 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d}" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def starts_shown(workloads: Iterable[Workload], now: datetime) -> dict[uuid.UUID, StartShown]:
    """The estimated start of each waiting workload of a page that has one (one query)."""
    waiting = [w for w in workloads if w.status in WAITING_STATUSES and not w.cancel_requested]
    estimates = scheduling.workload_estimates(w.pk for w in waiting)
    return {w.pk: start_shown(w, estimates[w.pk], now) for w in waiting if w.pk in estimates}


def gpus_asked(workload: Workload) -> str:
    """What the workload asks for, in the list's words: "4 GPUs x 2 nodes", "0.5 GPU"."""
    if workload.gpu_milli < 1000:
        share = f"{workload.gpu_milli / 1000:g} GPU"
        return share if workload.nodes == 1 else f"{share} x {workload.nodes} nodes"
    gpus = f"{workload.gpus_per_node} GPU{'s' if workload.gpus_per_node != 1 else ''}"
    nodes = f"{workload.nodes} node{'s' if workload.nodes != 1 else ''}"
    at_least = f" (at least {workload.min_nodes})" if workload.min_nodes else ""
    return f"{gpus} x {nodes}{at_least}"


# --- one workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuBox:
    index: int
    held: bool
    healthy: bool = True


@dataclass(frozen=True)
class NodePlacement:
    """One node's part of an allocation, beside every GPU the node has."""

    node: str
    gpus: list[int]
    boxes: list[GpuBox]
    gpu_milli: int


@dataclass(frozen=True)
class Moment:
    """One event of the workload's stream, in plain words."""

    at: datetime
    title: str
    line: str


@dataclass(frozen=True)
class Detail:
    workload: Workload
    final: bool
    state: scheduling.WorkloadState
    placement: list[NodePlacement]
    placement_held: bool  # the allocation held now (else the last run's, released)
    placement_model: str
    figures: list[tuple[str, str]]  # the pending reason's figures, labelled
    start: StartShown | None  # while it waits, when it is expected to start
    timeline: list[Moment]
    assignments: list[Assignment]
    program: str  # the command as one shell line ("" for the image's entrypoint)


def workload_detail(workload: Workload) -> Detail:
    """What the workload's page shows but its output; queries do not grow with its events,
    runs or nodes."""
    state = scheduling.workload_states([workload])[workload.pk]
    allocation = state.placement or (
        Allocation.objects.filter(workload_id=workload.pk).order_by("-granted_at").first()
    )
    wait = state.pending_reason
    return Detail(
        workload=workload,
        final=workload.status in FINAL_STATUSES,
        state=state,
        placement=_placement(allocation.placements) if allocation else [],
        placement_held=state.placement is not None,
        placement_model=allocation.gpu_model if allocation else "",
        figures=_figures(wait.figures) if wait else [],
        start=start_shown(workload, state.estimate, timezone.now()) if state.estimate else None,
        timeline=[_moment(e) for e in scheduling.workload_events(workload)],
        assignments=execution.workload_assignments(workload),
        program=shlex.join(workload.command) if workload.command else "",
    )


def _placement(placements: Sequence[Mapping[str, Any]]) -> list[NodePlacement]:
    """Each node of the allocation with a box per GPU of the node, the allocated marked."""
    nodes = {str(p["node_id"]) for p in placements}
    fleet: dict[str, dict[int, bool]] = defaultdict(dict)
    for node_id, index, healthy in Gpu.objects.filter(node_id__in=nodes).values_list(
        "node_id", "index", "healthy"
    ):
        fleet[str(node_id)][index] = healthy
    shown = []
    for part in placements:
        held = set(part["gpus"])
        gpus = fleet.get(str(part["node_id"])) or dict.fromkeys(held, True)
        shown.append(
            NodePlacement(
                node=str(part["node"]),
                gpus=sorted(held),
                boxes=[GpuBox(i, i in held, gpus.get(i, True)) for i in sorted({*gpus, *held})],
                gpu_milli=int(part["gpu_milli"]),
            )
        )
    return shown


def _figures(figures: Mapping[str, object]) -> list[tuple[str, str]]:
    """The reason's figures a person reads, labelled; the per-model breakdown is already in
    its message."""
    shown = []
    for key, value in figures.items():
        if isinstance(value, Mapping):
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "none"
        label = key.replace("_", " ").capitalize().replace("Gpu", "GPU")
        shown.append((label, str(value)))
    return shown


def _when(event: Event, key: str) -> datetime:
    raw = event.data.get(key)
    return (parse_datetime(raw) if isinstance(raw, str) else None) or event.recorded_at


def _nodes(placements: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(
        f"{p['node']} (GPU{'s' if len(p['gpus']) != 1 else ''}"
        f" {', '.join(str(g) for g in p['gpus'])})"
        for p in placements
    )


def _moment(event: Event) -> Moment:
    data = event.data
    at = event.recorded_at
    kind = event.type.removeprefix("scheduler.")
    if kind == "WorkloadSubmitted":
        models = ", ".join(data.get("gpu_models") or []) or "any GPU model"
        line = f"asks for {data['gpus_per_node']} GPU(s) x {data['nodes']} node(s) of {models}"
        if data.get("gpu_milli", 1000) < 1000:
            line = f"asks for {data['gpu_milli'] / 1000:g} of a GPU of {models}"
        return Moment(at, "Submitted", f"{line}, priority class {data['priority_class']}")
    if kind == "WorkloadCancelRequested":
        return Moment(at, "Cancel asked", data.get("reason", ""))
    if kind == "WorkloadCancelled":
        return Moment(at, "Cancelled", data.get("reason", ""))
    if kind == "WorkloadProvisioning":
        return Moment(at, "Placed, provisioning", f"on {_nodes(data.get('placements', []))}")
    if kind == "WorkloadRunning":
        return Moment(_when(event, "started_at"), "Running", "")
    if kind == "WorkloadEndpointsReported":
        reached = ", ".join(
            f"port {e['port']} at {e['address']} ({e['node']})" for e in data.get("endpoints", [])
        )
        return Moment(at, "Reachable", reached or "no endpoints")
    if kind == "AllocationReleased":
        status = str(data.get("status", ""))
        title = "Released, back in the queue" if status == WorkloadStatus.PENDING else status
        said = data.get("message") or data.get("reason", "")
        return Moment(_when(event, "released_at"), title.capitalize(), str(said))
    # A type this page does not word yet: its name, split into words.
    return Moment(at, re.sub(r"(?<!^)(?=[A-Z])", " ", kind).capitalize(), "")


# --- its output ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Logs:
    text: str
    cursor: int
    complete: bool  # nothing more will come: the workload is final, its runs ended
    truncated_bytes: int
    dropped_bytes: int


def workload_logs(workload: Workload, cursor: int = 0) -> Logs:
    """The output of every run past ``cursor``, oldest first, as text; never waits."""
    output = execution.workload_output(workload, cursor=cursor, limit=LOG_CHUNKS)
    return Logs(
        text="".join(bytes(c.data).decode("utf-8", errors="replace") for c in output.chunks),
        cursor=output.cursor,
        complete=output.complete,
        truncated_bytes=output.truncated_bytes,
        dropped_bytes=output.dropped_bytes,
    )
