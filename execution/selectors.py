"""Execution reads: what a node's agent runs (its assignments with their derived desired
state and environment), how a run goes for the driver, and a workload's output.

Desired state is derived, never stored: an assignment is to run while its workload runs on
its allocation (the workload holds it, it is not released); once not, it is to stop if its
agent reported it started and not yet ended; else it is not listed at all.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from execution.models import ENDED_STATES, Assignment, AssignmentOutput, AssignmentState, LogChunk
from inventory.drivers import RunOutcome, RunState
from inventory.models import Gpu, Node
from scheduler import services as scheduling
from scheduler.models import FINAL_STATUSES, Allocation, Workload, WorkloadStatus
from scheduler.specs import MAX_RUNTIME_S
from storage import selectors as storage
from tenants import selectors as tenancy
from tenants.models import Project

RUN = "run"
STOP = "stop"
MASTER_PORT_BASE = 20_000
MASTER_PORT_SPAN = 20_000  # 20000-39999


# --- the jump host (issue 32) ----------------------------------------------------------------


def ssh_jump_permits(*, key_type: str, key_base64: str) -> str | None:
    """The gateway sshd's ``AuthorizedKeysCommand`` answer for one offered key: the key, may
    only forward to the sshd endpoints of the running workloads it may log in to
    (``restrict,port-forwarding,permitopen=...``); None where it reaches none (refused)."""
    projects = tenancy.ssh_key_projects(public_key=f"{key_type} {key_base64}")
    if not projects:
        return None
    endpoints = Workload.objects.filter(
        project_id__in=projects, ssh=True, status=WorkloadStatus.RUNNING
    ).values_list("endpoints", flat=True)
    opens = sorted(
        {
            str(endpoint["address"])
            for listed in endpoints
            for endpoint in listed
            if endpoint.get("kind") == "ssh"
        }
    )
    if not opens:
        return None
    permits = ",".join(f'permitopen="{address}"' for address in opens)
    return f"restrict,port-forwarding,{permits} {key_type} {key_base64}"


# --- what a node runs ------------------------------------------------------------------------


def node_desired(node: Node) -> list[tuple[Assignment, str]]:
    """The node's listed assignments and what each should do (run or stop), by id."""
    running = Workload.objects.filter(
        pk=OuterRef("workload_id"),
        allocation_id=OuterRef("allocation_id"),
        status=WorkloadStatus.RUNNING,
    )
    live = Allocation.objects.filter(pk=OuterRef("allocation_id"), released_at__isnull=True)
    rows = (
        Assignment.objects.filter(node=node)
        .annotate(runs_on_it=Exists(running), live=Exists(live), **_notice_facts())
        .filter(Q(runs_on_it=True, live=True) | Q(state=AssignmentState.RUNNING))
        .order_by("id")
    )
    return [(a, RUN if a.runs_on_it and a.live else STOP) for a in rows]


def node_runs_left(node: Node) -> list[Assignment]:
    """The node's runs the control plane ended (its failure, a cancel) that its agent has
    reported started and not yet ended: they may still hold its GPUs."""
    return [a for a, state in node_desired(node) if state == STOP]


def desired_version(
    desired: Sequence[tuple[Assignment, str]], ssh_keys: dict[uuid.UUID, list[str]] | None = None
) -> str:
    """The listing's version: a digest of its (id, desired) pairs and their notices, and of the
    SSH keys each run taking SSH authorizes (so a key added or removed, or a member gone, is
    news)."""
    now = timezone.now()
    text = ";".join(f"{a.pk}={state}{_notice_mark(a, state, now)}" for a, state in desired)
    for assignment_id, keys in sorted((ssh_keys or {}).items()):
        text += f";{assignment_id}:" + ",".join(keys)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def ssh_keys_of(desired: Sequence[tuple[Assignment, str]]) -> dict[uuid.UUID, list[str]]:
    """Per assignment to run whose workload takes SSH (issue 32), the ``authorized_keys``
    lines of its project's members (``<type> <base64> <fingerprint>``)."""
    wanted = [a.pk for a, state in desired if state == RUN]
    rows = Workload.objects.filter(
        pk__in=[a.workload_id for a, state in desired if state == RUN], ssh=True
    ).values_list("pk", "project_id")
    projects = dict(rows)
    if not projects:
        return {}
    keys = tenancy.ssh_keys_authorized(project_ids=set(projects.values()))
    return {
        a.pk: [f"{k.public_key} {k.fingerprint}" for k in keys[projects[a.workload_id]]]
        for a, _ in desired
        if a.pk in wanted and a.workload_id in projects
    }


def node_desired_version(node: Node) -> str:
    """The version of the node's listing as it is now."""
    desired = node_desired(node)
    return desired_version(desired, ssh_keys_of(desired))


@dataclass(frozen=True)
class Listed:
    """An assignment as its agent gets it."""

    assignment: Assignment
    desired: str
    workload: Workload
    env: dict[str, str]
    gpus: list[dict[str, Any]]
    cpu_milli: int
    memory_mib: int
    volumes: list[dict[str, Any]]
    notice: Notice | None = None
    restarts: int = 0
    ssh_keys: list[str] | None = None  # issue 32: None, no SSH; else authorized_keys lines


def node_assignments(node: Node) -> tuple[str, list[Listed]]:
    """The node's listing and its version. The environment holds the secrets' values of the
    assignments to run: this answer is the only place they leave the control plane."""
    desired = node_desired(node)
    ssh_keys = ssh_keys_of(desired)
    rows = [a for a, _ in desired]
    workloads = Workload.objects.in_bulk({a.workload_id for a in rows})
    allocations = Allocation.objects.in_bulk({a.allocation_id for a in rows})
    projects = Project.objects.in_bulk({w.project_id for w in workloads.values()})
    masters = {
        a.allocation_id: a.node
        for a in Assignment.objects.filter(
            allocation_id__in={a.allocation_id for a in rows}, rank=0
        ).select_related("node")
    }
    uuids = dict(Gpu.objects.filter(node=node).values_list("index", "uuid"))
    restarts = runs_before(rows)
    now = timezone.now()
    mounts = storage.volume_mounts({w.pk: w.volumes for w in workloads.values()})
    listed = []
    for assignment, state in desired:
        workload = workloads[assignment.workload_id]
        allocation = allocations[assignment.allocation_id]
        placement = allocation.placements[assignment.rank]
        secrets = (
            tenancy.secret_values(projects[workload.project_id], workload.secrets)
            if state == RUN
            else {}
        )
        listed.append(
            Listed(
                assignment=assignment,
                desired=state,
                workload=workload,
                env=_env(
                    assignment,
                    workload,
                    allocation,
                    projects[workload.project_id],
                    masters[assignment.allocation_id],
                    secrets,
                ),
                gpus=[{"index": i, "uuid": uuids.get(i, "")} for i in assignment.gpus],
                cpu_milli=int(placement["cpu_milli"]),
                memory_mib=int(placement["memory_mib"]),
                notice=notice_of(assignment, state, now),
                restarts=restarts.get(assignment.pk, 0),
                volumes=mounts.get(workload.pk, []),
                ssh_keys=ssh_keys.get(assignment.pk),
            )
        )
    return desired_version(desired, ssh_keys), listed


def _env(
    assignment: Assignment,
    workload: Workload,
    allocation: Allocation,
    project: Project,
    master: Node,
    secrets: dict[str, str],
) -> dict[str, str]:
    """The workload's variables, its secrets (names missing from the project are left out)
    and ours: ids and the gang's rendezvous, the same on every node but the rank's."""
    env = dict(workload.env)
    env.update({name: secrets[name] for name in workload.secrets if name in secrets})
    env.update(
        {
            "NEOCLOUD_WORKLOAD_ID": str(workload.pk),
            "NEOCLOUD_ALLOCATION_ID": str(allocation.pk),
            "NEOCLOUD_ASSIGNMENT_ID": str(assignment.pk),
            "NEOCLOUD_PROJECT": project.slug,
            "NEOCLOUD_NNODES": str(assignment.node_count),
            # Before the fleet's agents report an address, the node's name stands in.
            "MASTER_ADDR": getattr(master, "agent_address", "") or master.name,
            "MASTER_PORT": str(master_port(allocation.pk)),
            "WORLD_SIZE": str(sum(len(p["gpus"]) for p in allocation.placements)),
            "NODE_RANK": str(assignment.rank),
            "LOCAL_WORLD_SIZE": str(len(assignment.gpus)),
        }
    )
    if workload.array_id is not None:
        # A task of a job array learns which one it is, as Slurm's SLURM_ARRAY_TASK_ID.
        env.update(
            {
                "NEOCLOUD_ARRAY_ID": str(workload.array_id),
                "NEOCLOUD_ARRAY_INDEX": str(workload.array_index),
                "NEOCLOUD_ARRAY_COUNT": str(workload.array_count),
            }
        )
    return env


def master_port(allocation_id: uuid.UUID) -> int:
    """The gang's rendezvous port, the same on every node, spread by allocation."""
    return MASTER_PORT_BASE + allocation_id.int % MASTER_PORT_SPAN


def stop_grace_s() -> float:
    return float(settings.AGENT_STOP_GRACE_S)


# --- Preemption with notice, and resume (issue 32) --------------------------------------------


@dataclass(frozen=True)
class Notice:
    """The run is stopped at ``deadline`` (NeoCloud's clock); ``grace_s`` is what is left of
    it when the agent asks, which the agent counts on its own clock."""

    reason: str
    deadline: datetime
    grace_s: float


def _notice_facts() -> dict[str, Subquery]:
    """What a listed assignment's notice follows from: its allocation's release and its
    workload's run (while the workload runs on that allocation)."""
    allocation = Allocation.objects.filter(pk=OuterRef("allocation_id"))
    run = Workload.objects.filter(
        pk=OuterRef("workload_id"), allocation_id=OuterRef("allocation_id")
    )
    return {
        "released_for": Subquery(allocation.values("release_reason")[:1]),
        "released_on": Subquery(allocation.values("released_at")[:1]),
        "run_started_at": Subquery(run.values("started_at")[:1]),
        "run_max_s": Subquery(run.values("max_runtime_s")[:1]),
    }


def notice_of(assignment: Assignment, desired: str, now: datetime) -> Notice | None:
    """Derived, like the desired state (``scheduler.services.notices`` records it for the
    owner): a run to stop because it was preempted is killed ``notice_s`` after the release;
    a run whose ``max_runtime_s`` ends within ``notice_s`` is told before it ends."""
    notice = scheduling.notice_s()
    deadline: datetime | None = None
    reason = ""
    if desired == STOP and getattr(assignment, "released_for", "") == "preempted":
        released_on = assignment.released_on  # type: ignore[attr-defined]
        deadline, reason = released_on + timedelta(seconds=notice), "preempted"
    started, most = (
        getattr(assignment, "run_started_at", None),
        getattr(assignment, "run_max_s", None),
    )
    if desired == RUN and started is not None and most is not None:
        ends = started + timedelta(seconds=min(most, MAX_RUNTIME_S))
        if now >= ends - timedelta(seconds=notice):
            deadline, reason = ends, "max_runtime"
    if deadline is None:
        return None
    return Notice(reason, deadline, max(0.0, (deadline - now).total_seconds()))


def _notice_mark(assignment: Assignment, desired: str, now: datetime) -> str:
    """A notice changes the listing's version (its grace does not)."""
    notice = notice_of(assignment, desired, now)
    return f"!{notice.reason}" if notice else ""


def runs_before(rows: Sequence[Assignment]) -> dict[uuid.UUID, int]:
    """Per assignment, the runs its workload had before this one (its allocation): what
    ``NEOCLOUD_RESTARTS`` says. A run is counted once, by its rank 0."""
    firsts = Assignment.objects.filter(workload_id__in={a.workload_id for a in rows}, rank=0)
    started = list(firsts.values_list("workload_id", "created_at"))
    return {
        a.pk: sum(1 for w, at in started if w == a.workload_id and at < a.created_at) for a in rows
    }


# --- how a run goes --------------------------------------------------------------------------


def run_state(allocation_id: uuid.UUID) -> RunState:
    """The run from its assignments: failed as soon as one failed (the first by rank names
    node, rank and cause), succeeded once all exited 0, else running."""
    assignments = list(
        Assignment.objects.filter(allocation_id=allocation_id).select_related("node")
    )
    for assignment in assignments:
        cause = failure(assignment)
        if cause:
            return RunState(
                RunOutcome.FAILED, f"node {assignment.node.name} rank {assignment.rank}: {cause}"
            )
    if assignments and all(a.state == AssignmentState.EXITED for a in assignments):
        return RunState(RunOutcome.SUCCEEDED, "exited 0")
    return RunState(RunOutcome.RUNNING)


def failure(assignment: Assignment) -> str:
    """Why the assignment failed ("" if it did not)."""
    if assignment.state == AssignmentState.START_FAILED:
        return f"failed to start: {assignment.message}" if assignment.message else "failed to start"
    if assignment.state != AssignmentState.EXITED:
        return ""
    if assignment.oom:
        return "out of memory"
    if assignment.signal is not None:
        return f"killed by signal {assignment.signal}"
    if assignment.exit_code is None:
        message = assignment.message or "lost"
        return message if message.startswith("lost") else f"lost: {message}"
    if assignment.exit_code != 0:
        return f"exit code {assignment.exit_code}"
    return ""


# --- a workload's output ---------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    chunks: list[LogChunk]
    cursor: int
    complete: bool
    truncated_bytes: int
    dropped_bytes: int


def workload_assignments(workload: Workload) -> list[Assignment]:
    return list(
        Assignment.objects.filter(workload_id=workload.pk)
        .select_related("node")
        .prefetch_related("node__gpus")
        .order_by("created_at", "rank")
    )


def _complete(workload: Workload) -> bool:
    """The workload is final and every assignment it had has ended."""
    fresh = Workload.objects.filter(pk=workload.pk).values_list("status", flat=True).first()
    return fresh in FINAL_STATUSES and not (
        Assignment.objects.filter(workload_id=workload.pk).exclude(state__in=ENDED_STATES).exists()
    )


def workload_output(workload: Workload, *, cursor: int, limit: int) -> Output:
    """Chunks past ``cursor``, oldest first."""
    chunks = list(
        LogChunk.objects.filter(assignment__workload_id=workload.pk, id__gt=cursor)
        .select_related("assignment__node")
        .order_by("id")[:limit]
    )
    complete = _complete(workload)
    totals = AssignmentOutput.objects.filter(workload_id=workload.pk).aggregate(
        truncated=Sum("truncated_bytes"), dropped=Sum("dropped_bytes")
    )
    return Output(
        chunks=chunks,
        cursor=chunks[-1].pk if chunks else cursor,
        complete=complete and len(chunks) < limit,
        truncated_bytes=totals["truncated"] or 0,
        dropped_bytes=totals["dropped"] or 0,
    )


def workload_output_waits(workload_id: uuid.UUID, *, cursor: int) -> bool:
    """A follower has nothing to read yet: no chunk past ``cursor``, and the workload may
    still write some."""
    workload = Workload.objects.filter(pk=workload_id).first()
    if workload is None:
        return False
    return not (
        LogChunk.objects.filter(assignment__workload_id=workload_id, id__gt=cursor).exists()
        or _complete(workload)
    )
