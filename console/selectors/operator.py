"""What the operator pages read: the fleet as a grid of GPUs with who holds each, one node
with its allocations and history, every queue, the orders waiting for approval, and the
organizations in dunning. Operators see every organization, so nothing here is scoped: the
views let only staff in. Each read costs the same queries however many nodes, GPUs, queues
or workloads there are (one or two per cluster for the topology)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, OuterRef, Q, Subquery
from django.http import Http404

from billing.models import OPEN_STATUSES, Invoice, InvoiceStatus
from billing.money import Money
from console.selectors.capacity import borrowing
from events.models import Event
from inventory import events as inventory_events
from inventory.lifecycle import NodeAction, NodeState, allowed_actions
from inventory.models import Cluster, Node
from inventory.selectors import cluster_topology
from orders.models import Order, OrderStatus
from orders.selectors import approval_threshold
from scheduler.engine.forecast import Basis, StartEstimate
from scheduler.models import WAITING_STATUSES, Allocation, Queue, Workload, WorkloadWait
from scheduler.selectors import queues_of
from scheduler.services.what_if import ClusterWhatIf, duration_in_words
from tenants.models import Organization, Project, Quota

WHOLE = 1000  # milli-GPU
# What an operator may do to a node from its page (provisioning stays in the admin and API).
NODE_ACTIONS = (
    NodeAction.CORDON,
    NodeAction.UNCORDON,
    NodeAction.DRAIN,
    NodeAction.MAINTENANCE,
    NodeAction.DECOMMISSION,
)
# Free GPUs of a node in any other state take no new work.
TAKES_WORK = frozenset({NodeState.READY})
NOT_CONSIDERED = "not_considered"  # waiting, and no cycle has said why yet


# --- the fleet map --------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """A part of one GPU held by one allocation."""

    organization: str
    workload: str
    gpu_milli: int


@dataclass(frozen=True)
class GpuCell:
    """One GPU as the map shows it: ``state`` is free, allocated, shared, failed or cordoned
    (free on a node that takes no new work); ``label`` says it in words."""

    index: int
    state: str
    label: str
    shares: tuple[Share, ...]


@dataclass(frozen=True)
class NodeCell:
    id: str
    name: str
    state: str
    gpu_model: str
    domains: list[tuple[int, list[GpuCell]]]  # NVLink domain → its GPUs


@dataclass(frozen=True)
class RackRow:
    name: str
    spine: str
    nodes: list[NodeCell]


@dataclass(frozen=True)
class ClusterMap:
    slug: str
    name: str
    racks: list[RackRow]
    counts: dict[str, int]  # GPUs by state


def _shares_by_gpu(allocations: list[Allocation]) -> dict[tuple[str, int], list[Share]]:
    """Who holds what of each (node id, GPU index), from the live allocations' placements."""
    held: dict[tuple[str, int], list[Share]] = defaultdict(list)
    for allocation in allocations:
        for placement in allocation.placements:
            for index in placement["gpus"]:
                held[(str(placement["node_id"]), index)].append(
                    Share(
                        organization=allocation.organization.name,
                        workload=allocation.workload.name,
                        gpu_milli=placement["gpu_milli"],
                    )
                )
    return held


def _gpu_cell(node_state: str, gpu: dict[str, Any], shares: list[Share]) -> GpuCell:
    index = gpu["index"]
    if not gpu["healthy"] or node_state == NodeState.FAILED:
        return GpuCell(index, "failed", "failed", tuple(shares))
    if shares and all(s.gpu_milli >= WHOLE for s in shares):
        names = ", ".join(sorted({s.organization for s in shares}))
        return GpuCell(index, "allocated", f"allocated to {names}", tuple(shares))
    if shares:
        used = sum(s.gpu_milli for s in shares)
        return GpuCell(index, "shared", f"shared, {used}m of {WHOLE}m used", tuple(shares))
    if node_state not in TAKES_WORK:
        return GpuCell(index, "cordoned", f"free, node {node_state}", ())
    return GpuCell(index, "free", "free", ())


def _live(allocations: Any) -> list[Allocation]:
    return list(
        allocations.filter(released_at__isnull=True).select_related("organization", "workload")
    )


def _node_cell(node: dict[str, Any], held: dict[tuple[str, int], list[Share]]) -> NodeCell:
    return NodeCell(
        id=node["id"],
        name=node["name"],
        state=node["state"],
        gpu_model=node["gpu_model"] or "",
        domains=[
            (
                domain["domain"],
                [
                    _gpu_cell(node["state"], gpu, held.get((node["id"], gpu["index"]), []))
                    for gpu in domain["gpus"]
                ],
            )
            for domain in node["nvlink_domains"]
        ],
    )


def fleet_map() -> list[ClusterMap]:
    """Every cluster's racks, nodes and GPUs (``cluster_topology``), each GPU with its state
    and its holders (the live ``Allocation`` rows)."""
    held = _shares_by_gpu(_live(Allocation.objects.all()))
    result = []
    for cluster in Cluster.objects.order_by("slug"):
        topology = cluster_topology(cluster)
        counts: dict[str, int] = defaultdict(int)
        racks = []
        for spine in topology["spines"]:
            for rack in spine["racks"]:
                nodes = [_node_cell(node, held) for node in rack["nodes"]]
                for node in nodes:
                    for _, gpus in node.domains:
                        for gpu in gpus:
                            counts[gpu.state] += 1
                racks.append(RackRow(name=rack["rack"], spine=spine["spine"], nodes=nodes))
        result.append(ClusterMap(cluster.slug, cluster.name, racks, dict(counts)))
    return result


# --- one node -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeAllocation:
    allocation: Allocation
    gpus: list[int]  # this node's part
    gpu_milli: int  # of each of those GPUs


@dataclass(frozen=True)
class Moment:
    at: datetime
    said: str
    actor: str


@dataclass(frozen=True)
class NodePage:
    node: Node
    cell: NodeCell
    allocations: list[NodeAllocation]
    history: list[Moment]
    actions: list[NodeAction]


# A node stream event's phrase: its data's fields fill the braces.
NODE_PHRASES: dict[str, str] = {
    inventory_events.NodeRegistered.event_type: "registered as {name}",
    inventory_events.NodeRespecified.event_type: "specification changed",
    inventory_events.NodeTokenRotated.event_type: "agent token rotated",
    inventory_events.NodeStateChanged.event_type: "{action}: {from_state} → {to_state}",
    inventory_events.ProvisioningStarted.event_type: "{phase} run {run} started",
    inventory_events.ProvisioningStepStarted.event_type: "{phase} step {step} started"
    " (attempt {attempt})",
    inventory_events.ProvisioningStepSucceeded.event_type: "{phase} step {step} succeeded",
    inventory_events.ProvisioningStepFailed.event_type: "{phase} step {step} failed: {error}",
    inventory_events.GpuFailed.event_type: "GPU {index} failed: {reason}",
    inventory_events.GpuRecovered.event_type: "GPU {index} recovered",
}


def _said(event: Event) -> str:
    phrase = NODE_PHRASES.get(event.type)
    if phrase is None:
        return event.type
    said = phrase.format_map(defaultdict(str, event.data))
    reason = event.data.get("reason") if event.type.endswith("NodeStateChanged") else ""
    return f"{said} ({reason})" if reason else said


def node_page(node_id: str) -> NodePage:
    """A node, its GPUs as on the map, the live allocations placed on it, its stream's events
    in words (newest first), and the lifecycle actions its state allows; else a 404."""
    try:
        wanted = uuid.UUID(node_id)
    except ValueError as wrong:
        raise Http404 from wrong
    node = Node.objects.select_related("cluster", "rack").filter(pk=wanted).first()
    if node is None:
        raise Http404
    # The cluster's live allocations (an indexed read), those placed on the node picked here:
    # a JSON ``contains`` lookup would do it in the database, but SQLite has none.
    on_node = [
        allocation
        for allocation in _live(Allocation.objects.filter(cluster_id=node.cluster_id))
        if any(str(p["node_id"]) == str(node.pk) for p in allocation.placements)
    ]
    held = _shares_by_gpu(on_node)
    domains: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for gpu in node.gpus.order_by("index"):
        domains[gpu.nvlink_domain].append({"index": gpu.index, "healthy": gpu.healthy})
    cell = _node_cell(
        {
            "id": str(node.pk),
            "name": node.name,
            "state": node.state,
            "gpu_model": node.gpu_model_id,
            "nvlink_domains": [{"domain": d, "gpus": g} for d, g in sorted(domains.items())],
        },
        held,
    )
    allocations = [
        NodeAllocation(allocation, p["gpus"], p["gpu_milli"])
        for allocation in on_node
        for p in allocation.placements
        if str(p["node_id"]) == str(node.pk)
    ]
    events = Event.objects.filter(
        stream_type=inventory_events.NODE_STREAM, stream_id=str(node.pk)
    ).order_by("-version")
    history = [Moment(e.recorded_at, _said(e), e.metadata.get("actor", "")) for e in events]
    actions = [a for a in allowed_actions(NodeState(node.state)) if a in NODE_ACTIONS]
    return NodePage(node, cell, allocations, history, actions)


def node_for_action(node_id: str, action: str) -> tuple[Node, NodeAction]:
    """The node and one of ``NODE_ACTIONS`` named in a URL, else a 404."""
    try:
        wanted, chosen = uuid.UUID(node_id), NodeAction(action)
    except ValueError as wrong:
        raise Http404 from wrong
    node = Node.objects.filter(pk=wanted).first()
    if node is None or chosen not in NODE_ACTIONS:
        raise Http404
    return node, chosen


@dataclass(frozen=True)
class EstimateMoved:
    """One waiting workload's start before and after a change, in words."""

    name: str
    before: str
    after: str
    delay: str


@dataclass(frozen=True)
class WhatIfShown:
    """A what-if as the drain preview shows it: its totals, the longest delay in words, and
    each change."""

    answer: ClusterWhatIf
    longest: str
    rows: list[EstimateMoved]


def what_if_shown(answer: ClusterWhatIf) -> WhatIfShown:
    """A what-if's changes as the drain preview's table shows them (no query)."""

    def start(estimate: StartEstimate) -> str:
        if Basis.NEVER in estimate.basis:
            return "never"
        if estimate.start is None:
            return "not within a week"
        return f"{datetime.fromtimestamp(estimate.start, tz=UTC):%Y-%m-%d %H:%M} UTC"

    rows = []
    for change in answer.changes:
        if change.delay_s is None:
            delay = "—"
        elif change.delay_s >= 0:
            delay = f"{duration_in_words(change.delay_s)} later"
        else:
            delay = f"{duration_in_words(-change.delay_s)} sooner"
        rows.append(
            EstimateMoved(
                name=change.name or change.workload_id,
                before=start(change.before),
                after=start(change.after),
                delay=delay,
            )
        )
    longest = duration_in_words(answer.max_delay_s) if answer.max_delay_s else ""
    return WhatIfShown(answer, longest, rows)


# --- queues ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelUse:
    gpu_model: str
    held: float
    quota: int | None
    borrowed: float
    lendable: float


@dataclass(frozen=True)
class Waiting:
    code: str
    count: int
    oldest: datetime


@dataclass(frozen=True)
class QueueRow:
    project: Project
    cohort: str
    depth: int
    running: int
    models: list[ModelUse]
    waiting: list[Waiting] = field(default_factory=list)


@dataclass(frozen=True)
class Queues:
    queues: list[QueueRow]
    waiting: list[Waiting]  # all queues together


def _waiting() -> dict[uuid.UUID, list[Waiting]]:
    """Waiting workloads per project by the code the last cycle gave them: how many, and
    since when the oldest waits (one grouped query)."""
    code = WorkloadWait.objects.filter(workload_id=OuterRef("pk")).values("code")[:1]
    rows = (
        Workload.objects.filter(status__in=WAITING_STATUSES)
        .annotate(code=Subquery(code))
        .values("project_id", "code")
        .annotate(count=Count("id"), oldest=Min("submitted_at"))
    )
    by_project: dict[uuid.UUID, list[Waiting]] = defaultdict(list)
    for row in rows:
        by_project[row["project_id"]].append(
            Waiting(row["code"] or NOT_CONSIDERED, row["count"], row["oldest"])
        )
    for waiting in by_project.values():
        waiting.sort(key=lambda w: (-w.count, w.code))
    return by_project


def _together(groups: list[list[Waiting]]) -> list[Waiting]:
    counts: dict[str, int] = defaultdict(int)
    oldest: dict[str, datetime] = {}
    for group in groups:
        for w in group:
            counts[w.code] += w.count
            oldest[w.code] = min(oldest.get(w.code, w.oldest), w.oldest)
    return sorted(
        (Waiting(code, n, oldest[code]) for code, n in counts.items()),
        key=lambda w: (-w.count, w.code),
    )


def all_queues() -> Queues:
    """Every project's queue in every organization (``queues_of``): depth, GPUs held against
    its nominal quota per model, borrowed and lendable by the console's rule (``borrowing``),
    and its waiting workloads by pending-reason code."""
    queues = queues_of(Project.objects.all())
    projects = {
        p.pk: p
        for p in Project.objects.filter(pk__in=[q["project"] for q in queues]).select_related(
            "organization"
        )
    }
    quotas = {
        (q.organization_id, q.project_id, q.gpu_model): q.max_gpus for q in Quota.objects.all()
    }
    configured = set(Queue.objects.values_list("project_id", flat=True))
    waiting = _waiting()
    rows = []
    for queue in queues:
        project = projects[queue["project"]]
        held = {u["gpu_model"]: u["used"] for u in queue["usage"]}
        named = {
            m
            for (org, p, m) in quotas
            if org == project.organization_id and p in (None, project.pk)
        }
        lends = project.pk in configured or queue["depth"] + queue["running"] > 0
        models = []
        for model in sorted(set(held) | named):
            quota = quotas.get(
                (project.organization_id, project.pk, model),
                quotas.get((project.organization_id, None, model)),
            )
            used = held.get(model, 0.0)
            borrowed, lendable = borrowing(used, quota, queue["lending_limit"], lends)
            models.append(ModelUse(model, used, quota, borrowed, lendable))
        rows.append(
            QueueRow(
                project=project,
                cohort=queue["cohort"],
                depth=queue["depth"],
                running=queue["running"],
                models=models,
                waiting=waiting.get(project.pk, []),
            )
        )
    return Queues(rows, _together([r.waiting for r in rows]))


# --- orders and dunning ---------------------------------------------------------------------


def orders_waiting() -> tuple[list[Order], int]:
    """Orders over the approval threshold waiting for an operator, oldest first, and the
    threshold."""
    waiting = (
        Order.objects.filter(status=OrderStatus.VALIDATED, needs_approval=True)
        .select_related("organization", "project")
        .order_by("created_at", "id")
    )
    return list(waiting), approval_threshold()


def order_waiting(order_id: str) -> Order:
    try:
        wanted = uuid.UUID(order_id)
    except ValueError as wrong:
        raise Http404 from wrong
    order = Order.objects.select_related("organization", "project").filter(pk=wanted).first()
    if order is None:
        raise Http404
    return order


@dataclass(frozen=True)
class Dunning:
    """An organization's unpaid invoice after a failed payment: ``refused`` once dunning
    stopped retrying (or it was written off), when new work waits until it is paid
    (``billing.selectors.payment_refusal``)."""

    organization: Organization
    invoice: Invoice
    due: str
    refused: bool


def organizations_in_dunning() -> list[Dunning]:
    """Open invoices with a failed payment, or written off, oldest period first."""
    invoices = (
        Invoice.objects.filter(status__in=OPEN_STATUSES)
        .filter(Q(payment_failures__gt=0) | Q(status=InvoiceStatus.UNCOLLECTIBLE))
        .select_related("organization")
        .order_by("period", "number")
    )
    return [
        Dunning(
            organization=invoice.organization,
            invoice=invoice,
            due=Money(invoice.currency, invoice.amount_due_minor).format(),
            refused=invoice.status == InvoiceStatus.UNCOLLECTIBLE
            or invoice.payment_failures >= settings.BILLING_DUNNING_MAX_FAILURES,
        )
        for invoice in invoices
    ]
