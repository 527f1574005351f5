"""One scheduling cycle: ``schedule(snapshot, pending, policy, now) -> Decisions``.

Deterministic: the same inputs give the same decisions (every tie is broken by name).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.engine import reasons
from scheduler.engine.capacity import Capacity
from scheduler.engine.fairshare import effective_priority
from scheduler.engine.model import (
    WHOLE,
    Allocation,
    Decisions,
    PendingReason,
    Placement,
    Policy,
    Preemption,
    Request,
    Reservation,
    Snapshot,
)
from scheduler.engine.placement import Shapes, place
from scheduler.engine.quota import QuotaLedger


@dataclass
class _Blocker:
    """A workload that waits for capacity, and when it could start by runtime estimates."""

    workload: Request
    models: frozenset[str]
    earliest_start: float


def schedule(
    snapshot: Snapshot, pending: Sequence[Request], policy: Policy, now: float
) -> Decisions:
    # 1. Capacity and quota usage as the snapshot leaves them.
    capacity = Capacity(snapshot)
    ledger = QuotaLedger(policy, snapshot.allocations)
    running = {a.workload: a for a in snapshot.allocations}
    shapes = _shapes(policy, pending)
    models_in_fleet = {n.gpu_model for n in snapshot.nodes if n.gpu_model}
    granted: list[Allocation] = []
    granted_ids: set[str] = set()
    preempted: list[Preemption] = []
    waiting: dict[str, PendingReason] = {}
    blockers: list[_Blocker] = []

    # 2. Order: effective priority (with aging), then fair share, then arrival, then id.
    for request in _ordered(pending, policy, ledger, now):
        models = _models(request, models_in_fleet)
        if not models:
            waiting[request.id] = reasons.no_matching_model(request, snapshot)
            continue
        # 3. Head-of-line: a workload waiting for capacity holds back later ones that want
        #    the same models, unless they finish (by estimate) before it could start.
        blocker = _blocked_by(request, models, blockers, now, policy)
        if blocker is not None:
            waiting[request.id] = reasons.behind(request, blocker.workload)
            continue
        # 4. Quota, reservations and placement, model by model in order of preference.
        # Only work that ran before this cycle may be preempted: granting and taking back in
        # one cycle would be churn.
        earlier = {w: a for w, a in running.items() if w not in granted_ids}
        outcome = _admit(request, models, capacity, ledger, policy, shapes, now, earlier)
        if isinstance(outcome, tuple):
            allocation, victims = outcome
            for victim in victims:
                preempted.append(
                    Preemption(
                        victim=victim.workload,
                        for_workload=request.id,
                        reason=_why_preempted(victim, request, ledger),
                    )
                )
                ledger.remove(victim)
                running.pop(victim.workload, None)
            capacity.take(allocation)
            ledger.add(allocation)
            running[allocation.workload] = allocation
            granted.append(allocation)
            granted_ids.add(allocation.workload)
            continue
        waiting[request.id] = outcome
        if outcome.code in reasons.CAPACITY_CODES and _fits_when_empty(
            request, models, capacity, running, shapes
        ):
            start = _earliest_start(request, models, capacity, running, shapes)
            blockers.append(_Blocker(request, frozenset(models), start))
    return Decisions(allocations=tuple(granted), preemptions=tuple(preempted), pending=waiting)


def _models(request: Request, in_fleet: set[str]) -> list[str]:
    if request.gpu_models:
        return [m for m in request.gpu_models if m in in_fleet]
    return sorted(in_fleet)


def _shapes(policy: Policy, pending: Sequence[Request]) -> Shapes:
    """The typical shapes: configured, else learned from what is asked for now."""
    if policy.typical_shapes:
        return policy.typical_shapes
    counts = Counter(request.shape for request in pending)
    return {shape: float(count) for shape, count in counts.items()}


def _ordered(
    pending: Sequence[Request], policy: Policy, ledger: QuotaLedger, now: float
) -> list[Request]:
    weights = {name: max(q.weight, 1e-9) for name, q in policy.queues.items()}

    def share(queue: str) -> float:
        current = sum(ledger.used[queue].values()) / WHOLE
        return (current + policy.usage_history.get(queue, 0.0)) / weights.get(queue, 1.0)

    org_queues: dict[str, list[str]] = {}
    for request in pending:
        org_queues.setdefault(request.organization, [])
        if request.queue not in org_queues[request.organization]:
            org_queues[request.organization].append(request.queue)

    def org_share(organization: str) -> float:
        queues = org_queues.get(organization, [])
        return sum(share(q) for q in queues) / max(len(queues), 1)

    def key(request: Request) -> tuple[float, float, float, float, str]:
        priority = effective_priority(
            request.priority, now - request.submitted_at, policy.aging_priority_per_hour
        )
        return (
            -round(priority, 9),
            round(org_share(request.organization), 9),
            round(share(request.queue), 9),
            request.submitted_at,
            request.id,
        )

    return sorted(pending, key=key)


def _blocked_by(
    request: Request, models: list[str], blockers: list[_Blocker], now: float, policy: Policy
) -> _Blocker | None:
    for blocker in blockers:
        if blocker.workload.priority < request.priority or not blocker.models & set(models):
            continue
        fits_before = (
            policy.backfill
            and request.runtime_estimate_s is not None
            and now + request.runtime_estimate_s <= blocker.earliest_start
        )
        if not fits_before:
            return blocker
    return None


def _held(model: str, request: Request, ledger: QuotaLedger, policy: Policy, now: float) -> int:
    """Whole GPUs of ``model`` that reservations of others hold from this request."""
    held = 0
    for reservation in policy.reservations:
        if reservation.gpu_model != model or reservation.queue == request.queue:
            continue
        if not _applies(reservation, request, now):
            continue
        owner_uses = ledger.used[reservation.queue][model] // WHOLE
        held += max(0, reservation.gpus - owner_uses)
    return held


def _applies(reservation: Reservation, request: Request, now: float) -> bool:
    """A window holds capacity while open, and before it opens from work that would still run
    then (preemptible work may use it: it is evicted when the window opens)."""
    if now >= reservation.ends_at:
        return False
    if now >= reservation.starts_at:
        return True
    if request.preemptible:
        return False
    runtime = request.runtime_estimate_s
    return runtime is None or now + runtime > reservation.starts_at


def _admit(
    request: Request,
    models: list[str],
    capacity: Capacity,
    ledger: QuotaLedger,
    policy: Policy,
    shapes: Shapes,
    now: float,
    running: dict[str, Allocation],
) -> tuple[Allocation, list[Allocation]] | PendingReason:
    """An allocation (and the victims it needs), or the reason it must wait."""
    first_reason: PendingReason | None = None
    for model in models:
        quota = ledger.check(request.queue, model, request.gpu_demand_milli)
        if quota is not None:
            first_reason = first_reason or quota
            continue
        held = _held(model, request, ledger, policy, now)
        free = capacity.free_gpus_of([model])
        whole_needed = 0 if request.fractional else request.gpus_per_node * request.nodes
        if held and free - whole_needed < held:
            first_reason = first_reason or reasons.reserved(request, model, held, free, policy)
            continue
        placements = place(capacity, request, model, shapes)
        victims: list[Allocation] = []
        if placements is None:
            found = _preempt(request, model, capacity, ledger, shapes, running, policy)
            if found is not None:
                placements, victims = found
        if placements is not None:
            return _allocation(request, model, placements, now), victims
        first_reason = first_reason or reasons.no_room(request, model, capacity)
    return first_reason or reasons.no_room(request, models[0], capacity)


def _allocation(
    request: Request, model: str, placements: tuple[Placement, ...], now: float
) -> Allocation:
    return Allocation(
        workload=request.id,
        queue=request.queue,
        gpu_model=model,
        placements=placements,
        priority=request.priority,
        preemptible=request.preemptible,
        organization=request.organization,
        started_at=now,
        ends_at=now + request.runtime_estimate_s if request.runtime_estimate_s else None,
        reservation=request.reservation,
    )


def _victim_candidates(
    request: Request,
    model: str,
    ledger: QuotaLedger,
    running: dict[str, Allocation],
    policy: Policy,
) -> list[Allocation]:
    """Who may lose GPUs for ``request``: lower-priority preemptible work; work of queues that
    borrow, when the request stays within its own nominal quota (reclaim); and preemptible work
    on capacity the request's reservation holds."""
    reclaiming = ledger.within_nominal(request.queue, model, request.gpu_demand_milli)
    owns_window = any(
        r.id == request.reservation and r.queue == request.queue for r in policy.reservations
    )
    candidates = []
    for allocation in running.values():
        if allocation.gpu_model != model or allocation.workload == request.id:
            continue
        lower = allocation.preemptible and allocation.priority < request.priority
        borrower = (
            reclaiming
            and allocation.queue != request.queue
            and ledger.borrowing(allocation.queue, model) > 0
        )
        evictable = owns_window and allocation.preemptible and allocation.queue != request.queue
        if lower or borrower or evictable:
            candidates.append(allocation)
    # Cheapest first: lowest priority, then the most recently started, then the smallest.
    return sorted(candidates, key=lambda a: (a.priority, -a.started_at, a.gpu_milli, a.workload))


def _preempt(
    request: Request,
    model: str,
    capacity: Capacity,
    ledger: QuotaLedger,
    shapes: Shapes,
    running: dict[str, Allocation],
    policy: Policy,
) -> tuple[tuple[Placement, ...], list[Allocation]] | None:
    """The smallest set of victims whose removal lets the request fit, or None (then nobody is
    touched: preempting what would not make it fit is never done)."""
    candidates = _victim_candidates(request, model, ledger, running, policy)
    removed: list[Allocation] = []
    placements = None
    for victim in candidates:
        capacity.give(victim)
        removed.append(victim)
        placements = place(capacity, request, model, shapes)
        if placements is not None:
            break
    if placements is None:
        for victim in removed:
            capacity.take(victim)
        return None
    # Give back every victim the placement can do without, most valuable first.
    for victim in sorted(removed, key=lambda a: (-a.priority, a.started_at, a.workload)):
        capacity.take(victim)
        without = place(capacity, request, model, shapes)
        if without is None:
            capacity.give(victim)
        else:
            removed.remove(victim)
            placements = without
    return placements, removed


def _why_preempted(victim: Allocation, request: Request, ledger: QuotaLedger) -> str:
    if victim.priority < request.priority and victim.preemptible:
        return f"priority: {request.id} (priority {request.priority}) needs its GPUs"
    if request.reservation is not None:
        return f"reservation {request.reservation} opened for {request.queue}"
    return f"reclaim: queue {request.queue} takes back its nominal quota"


def _fits_when_empty(
    request: Request,
    models: list[str],
    capacity: Capacity,
    running: dict[str, Allocation],
    shapes: Shapes,
) -> bool:
    """Whether running work is what keeps the request out (else it blocks nobody: it waits
    for capacity the cluster does not have)."""
    mine = [a for a in running.values() if a.gpu_model in models]
    for allocation in mine:
        capacity.give(allocation)
    fits = any(place(capacity, request, model, shapes) is not None for model in models)
    for allocation in mine:
        capacity.take(allocation)
    return fits


def _earliest_start(
    request: Request,
    models: list[str],
    capacity: Capacity,
    running: dict[str, Allocation],
    shapes: Shapes,
) -> float:
    """When the request could start if running work ends as estimated (inf: unknown)."""
    ending = sorted(
        (a.ends_at, a.workload, a)
        for a in running.values()
        if a.ends_at is not None and a.gpu_model in models
    )
    released: list[Allocation] = []
    start = float("inf")
    for ends_at, _, allocation in ending:
        capacity.give(allocation)
        released.append(allocation)
        if any(place(capacity, request, model, shapes) is not None for model in models):
            start = ends_at
            break
    for allocation in released:
        capacity.take(allocation)
    return start
