"""Fleet writes: definitions (idempotent, so imports can run again), node lifecycle through
the table of ``lifecycle``, heartbeats. Each node write locks the node's row, then appends to
its stream with the version it read.

Provisioning itself (the steps, their retries) runs in ``provisioning`` and ``tasks``; the
services only start a run and hand it to a worker once the transaction commits.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from events import store
from events.types import DomainEvent
from inventory import events as ev
from inventory import hooks
from inventory.drivers import PROVISION_STEPS, TEARDOWN_STEPS
from inventory.errors import InvalidTransition, UnknownGpu
from inventory.lifecycle import NodeAction, NodeState, allowed_actions, next_state
from inventory.models import Cluster, Gpu, GpuModel, Node, Rack, Region
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants import secrets
from tenants.access import Action, Actor

# Deterministic ids: importing the same fleet twice names the same rows.
FLEET_NAMESPACE = uuid.UUID("7c1f2f5e-4f0e-4e55-9f43-6e656f636c64")
HEARTBEAT_MONITORED = frozenset({NodeState.READY, NodeState.CORDONED, NodeState.DRAINING})


def fleet_id(*parts: str) -> uuid.UUID:
    return uuid.uuid5(FLEET_NAMESPACE, "/".join(parts))


def _append(
    actor: Actor,
    stream_type: str,
    stream_id: str,
    events: Sequence[DomainEvent],
    expected_version: int,
) -> None:
    store.append(
        stream_type, stream_id, events, expected_version=expected_version, metadata=actor.metadata()
    )


# --- definitions ---------------------------------------------------------------------------


def gpu_model_define(
    *,
    actor: Actor,
    slug: str,
    name: str,
    vendor: str,
    memory_gib: int,
    interconnect: str,
    shareable: bool,
    mig_profiles: Sequence[str] = (),
) -> GpuModel:
    actor.require(Action.FLEET_WRITE)
    wanted = ev.GpuModelDefined(
        slug=slug,
        name=name,
        vendor=vendor,
        memory_gib=memory_gib,
        interconnect=interconnect,
        shareable=shareable,
        mig_profiles=list(mig_profiles),
    )
    current = GpuModel.objects.filter(slug=slug).values().first()
    if current != wanted.model_dump():
        _append(
            actor,
            ev.GPU_MODEL_STREAM,
            slug,
            [wanted],
            store.stream_version(ev.GPU_MODEL_STREAM, slug),
        )
    return GpuModel.objects.get(slug=slug)


def region_define(*, actor: Actor, slug: str, name: str) -> Region:
    actor.require(Action.FLEET_WRITE)
    if not Region.objects.filter(slug=slug, name=name).exists():
        _append(
            actor,
            ev.REGION_STREAM,
            slug,
            [ev.RegionDefined(slug=slug, name=name)],
            store.stream_version(ev.REGION_STREAM, slug),
        )
    return Region.objects.get(slug=slug)


def cluster_define(*, actor: Actor, region: Region, slug: str, name: str) -> Cluster:
    actor.require(Action.FLEET_WRITE)
    cluster_id = fleet_id("cluster", slug)
    if not Cluster.objects.filter(id=cluster_id, region=region, name=name).exists():
        _append(
            actor,
            ev.CLUSTER_STREAM,
            str(cluster_id),
            [ev.ClusterDefined(cluster_id=cluster_id, region=region.slug, slug=slug, name=name)],
            store.stream_version(ev.CLUSTER_STREAM, str(cluster_id)),
        )
    return Cluster.objects.get(id=cluster_id)


def rack_define(
    *, actor: Actor, cluster: Cluster, name: str, leaf_switch: str = "", spine: str = ""
) -> Rack:
    actor.require(Action.FLEET_WRITE)
    rack_id = fleet_id("rack", cluster.slug, name)
    leaf_switch = leaf_switch or f"leaf-{name}"
    if not Rack.objects.filter(id=rack_id, leaf_switch=leaf_switch, spine=spine).exists():
        cluster = row_lock(Cluster.objects.all()).get(pk=cluster.pk)
        _append(
            actor,
            ev.CLUSTER_STREAM,
            str(cluster.pk),
            [ev.RackDefined(rack_id=rack_id, name=name, leaf_switch=leaf_switch, spine=spine)],
            cluster.version,
        )
    return Rack.objects.get(id=rack_id)


@dataclass(frozen=True)
class GpuSlot:
    """A GPU as an import describes it."""

    index: int
    nvlink_domain: int = 0
    uuid: str = ""


def node_register(
    *,
    actor: Actor,
    cluster: Cluster,
    name: str,
    gpu_model: GpuModel | None,
    cpu_milli: int,
    memory_mib: int,
    gpus: Sequence[GpuSlot],
    rack: Rack | None = None,
    driver: str = "",
) -> tuple[Node, str | None]:
    """Register a node with its GPUs; the node agent's token is returned once (None when the
    node was known: then only a changed description is recorded)."""
    actor.require(Action.FLEET_WRITE)
    node_id = fleet_id("node", cluster.slug, name)
    existing = row_lock(Node.objects.all()).filter(id=node_id).first()
    if existing is not None:
        wanted = ev.NodeRespecified(
            rack_id=rack.pk if rack else None,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            driver=driver,
        )
        if (existing.rack_id, existing.cpu_milli, existing.memory_mib, existing.driver) != (
            wanted.rack_id,
            wanted.cpu_milli,
            wanted.memory_mib,
            wanted.driver,
        ):
            _append(actor, ev.NODE_STREAM, str(node_id), [wanted], existing.version)
        return Node.objects.get(pk=node_id), None
    token = secrets.new_token()
    specs = [
        ev.GpuSpec(
            gpu_id=fleet_id("gpu", cluster.slug, name, str(slot.index)),
            index=slot.index,
            uuid=slot.uuid or _gpu_uuid(cluster.slug, name, slot.index),
            nvlink_domain=slot.nvlink_domain,
        )
        for slot in gpus
    ]
    _append(
        actor,
        ev.NODE_STREAM,
        str(node_id),
        [
            ev.NodeRegistered(
                node_id=node_id,
                cluster_id=cluster.pk,
                rack_id=rack.pk if rack else None,
                name=name,
                gpu_model=gpu_model.slug if gpu_model else None,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                gpus=specs,
                token_hash=secrets.digest(token),
                driver=driver,
            )
        ],
        0,
    )
    return Node.objects.get(pk=node_id), token


def node_token_rotate(*, actor: Actor, node: Node) -> tuple[Node, str]:
    """A new node-agent token (shown once); the old one stops working at once."""
    actor.require(Action.FLEET_WRITE)
    node = _locked(node)
    token = secrets.new_token()
    _append(
        actor,
        ev.NODE_STREAM,
        str(node.pk),
        [ev.NodeTokenRotated(token_hash=secrets.digest(token))],
        node.version,
    )
    return Node.objects.get(pk=node.pk), token


# --- lifecycle -----------------------------------------------------------------------------


def _locked(node: Node) -> Node:
    """The node as it is now, locked until the transaction ends (then the append lock)."""
    return row_lock(Node.objects.all()).get(pk=node.pk)


def _transition(node: Node, action: NodeAction, reason: str) -> ev.NodeStateChanged:
    current = NodeState(node.state)
    target = next_state(current, action)
    if target is None:
        raise InvalidTransition(
            f"node {node.name} is {current}: cannot {action}",
            details={
                "state": current.value,
                "action": action.value,
                "allowed": [a.value for a in allowed_actions(current)],
            },
        )
    return ev.NodeStateChanged(
        action=action.value, from_state=current.value, to_state=target.value, reason=reason
    )


def node_transition(*, actor: Actor, node: Node, action: NodeAction, reason: str = "") -> Node:
    """Apply one lifecycle action (operators' cordon, uncordon, drain, maintenance)."""
    actor.require(Action.FLEET_WRITE)
    node = _locked(node)
    changes: list[DomainEvent] = [_transition(node, action, reason)]
    if action is NodeAction.DRAIN and not _has_allocations(node):
        # Nothing runs on it: the drain is complete at once.
        changes.append(
            ev.NodeStateChanged(
                action=NodeAction.MAINTENANCE.value,
                from_state=NodeState.DRAINING.value,
                to_state=NodeState.MAINTENANCE.value,
                reason="drained",
            )
        )
    _append(actor, ev.NODE_STREAM, str(node.pk), changes, node.version)
    return Node.objects.get(pk=node.pk)


def _has_allocations(node: Node) -> bool:
    return any(hooks.node_has_work.call_all(node))


def node_drain_check(*, actor: Actor, node: Node) -> Node:
    """A draining node whose last work ended goes to maintenance."""
    node = _locked(node)
    if node.state == NodeState.DRAINING and not _has_allocations(node):
        _append(
            actor,
            ev.NODE_STREAM,
            str(node.pk),
            [
                ev.NodeStateChanged(
                    action=NodeAction.MAINTENANCE.value,
                    from_state=NodeState.DRAINING.value,
                    to_state=NodeState.MAINTENANCE.value,
                    reason="drained",
                )
            ],
            node.version,
        )
    return node


def node_provision(*, actor: Actor, node: Node) -> Node:
    """Start a provisioning run; a worker takes it over once this commits."""
    return _start_run(actor, node, NodeAction.PROVISION, "provision", PROVISION_STEPS, None)


def node_decommission(*, actor: Actor, node: Node, reason: str = "") -> Node:
    """Retire the node; a worker tears its resources down once this commits."""
    return _start_run(actor, node, NodeAction.DECOMMISSION, "teardown", TEARDOWN_STEPS, reason)


def _start_run(
    actor: Actor,
    node: Node,
    action: NodeAction,
    phase: str,
    steps: Sequence[str],
    reason: str | None,
) -> Node:
    """The lifecycle step and a new run of ``steps`` (``reason`` None: the run's number),
    handed to a worker on commit."""
    actor.require(Action.FLEET_WRITE)
    node = _locked(node)
    run = node.provisioning_run + 1
    _append(
        actor,
        ev.NODE_STREAM,
        str(node.pk),
        [
            _transition(node, action, f"provisioning run {run}" if reason is None else reason),
            ev.ProvisioningStarted(run=run, phase=phase, steps=list(steps)),
        ],
        node.version,
    )
    hooks.provisioning_started.on_commit(node.pk)
    return Node.objects.get(pk=node.pk)


def node_fail(*, actor: Actor, node: Node, reason: str) -> Node:
    """Mark the node failed (heartbeats lost, provisioning gave up, an operator said so), and
    in the same transaction give back the work that ran on it."""
    with transaction.atomic():
        node = _locked(node)
        _append(
            actor,
            ev.NODE_STREAM,
            str(node.pk),
            [_transition(node, NodeAction.FAIL, reason)],
            node.version,
        )
        hooks.node_failed.call_all(node, reason)
    return Node.objects.get(pk=node.pk)


# --- health ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuHealth:
    """One GPU as its node agent reports it: health always; what nvidia-smi says of it
    (uuid, model, memory) and its telemetry when the agent sends them."""

    index: int
    healthy: bool
    reason: str = ""
    uuid: str = ""
    model: str = ""
    memory_mib: int | None = None
    utilization_pct: float | None = None
    memory_used_mib: int | None = None


@dataclass(frozen=True)
class AgentInfo:
    """What a node agent says of itself. A heartbeat that carries it is a full report: its
    GPUs are all the node has, so they are checked against the fleet."""

    version: str = ""
    runtime: str = ""
    address: str = ""
    fake_gpus: bool = False
    cgroups: bool = False
    cgroups_note: str = ""
    volumes_disk_gb: int = 0  # disk the agent offers local volumes (issue 32)


def node_heartbeat(
    *,
    actor: Actor,
    node: Node,
    gpus: Sequence[GpuHealth],
    agent: AgentInfo | None = None,
    volumes: Sequence[tuple[uuid.UUID, int]] = (),
    now: datetime | None = None,
) -> Node:
    """A node agent reports in. Its time, its own description and its GPUs' telemetry are
    written in place (not events); a GPU that turns faulty or recovers is an event, and so
    is the cordon of a ready node whose full report does not match the fleet
    (``Node.inventory_mismatch`` says what differs). The volumes' usage it measured goes to
    storage (``hooks.volumes_measured``), after the node's own append."""
    now = now or timezone.now()
    node = _locked(node)
    known = {gpu.index: gpu for gpu in Gpu.objects.filter(node=node)}
    mismatch = None if agent is None else _inventory_mismatch(node, known, gpus, agent)
    changes: list[DomainEvent] = []
    for report in gpus:
        gpu = known.get(report.index)
        if gpu is None:
            if mismatch:  # a full report of GPUs the fleet lacks: the mismatch says so
                continue
            raise UnknownGpu(
                f"node {node.name} has no GPU {report.index}",
                fields={"gpus": [f"unknown index {report.index}"]},
            )
        if gpu.healthy and not report.healthy:
            changes.append(ev.GpuFailed(index=report.index, reason=report.reason or "reported"))
        elif not gpu.healthy and report.healthy:
            changes.append(ev.GpuRecovered(index=report.index))
    if mismatch and next_state(NodeState(node.state), NodeAction.CORDON) is not None:
        reason = f"inventory mismatch: {mismatch}"[:300]
        changes.append(_transition(node, NodeAction.CORDON, reason))
    _telemetry_write(node, known, gpus, agent, mismatch, now)
    if changes:
        _append(actor, ev.NODE_STREAM, str(node.pk), changes, node.version)
    if volumes:
        hooks.volumes_measured.call_all(node, list(volumes))
    return Node.objects.get(pk=node.pk)


def _telemetry_write(
    node: Node,
    known: dict[int, Gpu],
    gpus: Sequence[GpuHealth],
    agent: AgentInfo | None,
    mismatch: str | None,
    now: datetime,
) -> None:
    """The heartbeat's telemetry, in place. A GPU is idle from the first report of it below
    ``GPU_IDLE_THRESHOLD_PCT``, until one above."""
    node_fields: dict[str, object] = {"last_heartbeat_at": now}
    if agent is not None:
        node_fields["agent_info"] = dataclasses.asdict(agent)
        node_fields["agent_address"] = agent.address
    if mismatch is not None:
        node_fields["inventory_mismatch"] = mismatch[:300]
    Node.objects.filter(pk=node.pk).update(**node_fields)
    threshold = settings.GPU_IDLE_THRESHOLD_PCT
    measured = []
    for report in gpus:
        gpu = known.get(report.index)
        if gpu is None or (report.utilization_pct is None and report.memory_used_mib is None):
            continue
        if report.utilization_pct is not None:
            gpu.utilization_pct = report.utilization_pct
            busy = report.utilization_pct >= threshold
            gpu.idle_since = None if busy else (gpu.idle_since or now)
        if report.memory_used_mib is not None:
            gpu.memory_used_mib = report.memory_used_mib
        gpu.telemetry_at = now
        measured.append(gpu)
    if measured:
        Gpu.objects.bulk_update(
            measured, ["utilization_pct", "memory_used_mib", "telemetry_at", "idle_since"]
        )


def _inventory_mismatch(
    node: Node, known: dict[int, Gpu], gpus: Sequence[GpuHealth], agent: AgentInfo
) -> str:
    """What a full report says differently from the fleet ("" when nothing): the number of
    GPUs, a GPU's model (normalised, against the node's model's slug and name), a GPU's UUID
    where the fleet holds a real one (not ``_gpu_uuid``'s stand-in). Fake GPUs have no UUIDs
    worth comparing."""
    found = []
    if len(gpus) != len(known):
        found.append(f"{len(gpus)} GPUs reported, the fleet has {len(known)}")
    unknown = [str(r.index) for r in gpus if r.index not in known]
    if unknown:
        found.append(f"GPU {', '.join(unknown)} not in the fleet")
    model = node.gpu_model
    if model is not None:
        expected = {_model_key(model.slug), _model_key(model.name)}
        wrong = sorted({r.model for r in gpus if r.model and _model_key(r.model) not in expected})
        if wrong:
            found.append(f"model {', '.join(wrong)} reported, the fleet has {model.slug}")
    if not agent.fake_gpus:
        cluster = Cluster.objects.only("slug").get(pk=node.cluster_id).slug
        differ = [
            str(r.index)
            for r in gpus
            if (gpu := known.get(r.index)) is not None
            and r.uuid
            and r.uuid != gpu.uuid
            and gpu.uuid != _gpu_uuid(cluster, node.name, gpu.index)
        ]
        if differ:
            found.append(f"UUID of GPU {', '.join(differ)} differs from the fleet's")
    return "; ".join(found)


def _model_key(model: str) -> str:
    """A GPU model's name as nvidia-smi and the fleet can both be compared by: lowercase,
    without a leading "nvidia", letters and digits only ("NVIDIA H100 SXM" → "h100sxm")."""
    key = model.lower().strip()
    key = key.removeprefix("nvidia")
    return re.sub(r"[^a-z0-9]", "", key)


def heartbeats_check(
    *, actor: Actor, threshold: timedelta, now: datetime | None = None
) -> list[Node]:
    """Fail every monitored node not heard from within ``threshold`` (a node that never sent
    one is measured from when it became ready), each in a transaction of its own."""
    now = now or timezone.now()
    failed = []
    for node in Node.objects.filter(state__in=HEARTBEAT_MONITORED):
        last_seen = node.last_heartbeat_at or node.state_changed_at
        if now - last_seen > threshold:
            gone = atomic_with_retry(_fail_if_silent, actor, node, threshold, now)
            if gone is not None:
                failed.append(gone)
    return failed


def _fail_if_silent(actor: Actor, node: Node, threshold: timedelta, now: datetime) -> Node | None:
    fresh = _locked(node)
    seen = fresh.last_heartbeat_at or fresh.state_changed_at
    if fresh.state not in HEARTBEAT_MONITORED or now - seen <= threshold:
        return None
    return node_fail(actor=actor, node=fresh, reason=f"heartbeat missed since {seen.isoformat()}")


def _gpu_uuid(cluster: str, node: str, index: int) -> str:
    """A stable stand-in for the UUID nvidia-smi reports, when an import gives none."""
    return f"GPU-{fleet_id('gpu-uuid', cluster, node, str(index))}"
