"""Admission of one request, model by model: quota, reservations, then placement, with
preemption when nothing fits (Kueue's flavor assigner, a GPU model being a flavor).

Admission tries on the cycle's capacity and quota ledger and leaves them as it found them,
but for an admission's victims: their capacity is given back (the request lands on it), while
the ledger still counts them until the cycle preempts them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from scheduler.engine import preemption, reasons
from scheduler.engine.capacity import Capacity
from scheduler.engine.model import (
    WHOLE,
    Allocation,
    PendingReason,
    Placement,
    Policy,
    ReasonCode,
    Request,
    Reservation,
    Topology,
)
from scheduler.engine.placement import Shapes, place, weigh
from scheduler.engine.preemption import ByCost, Cause
from scheduler.engine.quota import QuotaLedger


@dataclass(frozen=True, slots=True)
class Admission:
    """A request admitted: its allocation, the running work it preempts (their capacity
    already given back) and what they make room for."""

    allocation: Allocation
    victims: tuple[Allocation, ...] = ()
    cause: Cause = Cause.CAPACITY


@dataclass(frozen=True, slots=True)
class Cluster:
    """What admission reads and tries placements on in one cycle: free capacity, quota usage,
    running work by cost, the policy (its reservations), the typical shapes, and why a request
    fits nowhere on a model (the reason, worked out at most once while nothing moves)."""

    capacity: Capacity
    ledger: QuotaLedger
    running: ByCost
    policy: Policy
    shapes: Shapes
    no_room: Callable[[Request, str], PendingReason]


def acceptable_models(request: Request, in_fleet: Collection[str]) -> list[str]:
    """The models the request may take that the fleet has: named ones in order of preference,
    else all of them by name."""
    if request.gpu_models:
        return [m for m in request.gpu_models if m in in_fleet]
    return sorted(in_fleet)


def admit(
    request: Request, models: list[str], cluster: Cluster, now: float
) -> Admission | PendingReason:
    """An admission of ``request`` on one of ``models``, or the reason it must wait.

    Acceptable models named: the first, in order of preference, where the request fits (by
    placement, else by preemption: for capacity, or for quota when that is what it lacks).
    Any model: the placement that fragments least across all of them (ties to the model's
    name; an elastic gang's largest first); preemption, in name order, only when none fits:
    for capacity first, then for quota."""
    capacity, shapes = cluster.capacity, cluster.shapes
    waits: dict[str, PendingReason] = {}  # by model, in the order tried
    trials: list[tuple[str, Request]] = []
    for model in models:
        trial = _trial(request, model, cluster, now)
        if isinstance(trial, PendingReason):
            waits[model] = trial
            if request.gpu_models and trial.code is ReasonCode.QUOTA:
                admission = _free_quota(request, model, cluster, now)
                if admission is not None:
                    return admission
        elif not request.gpu_models:
            trials.append((model, trial))
        else:
            placements = place(capacity, trial, model, shapes)
            if placements is not None:
                return Admission(_allocation(request, model, placements, now))
            admission = _preempt(request, trial, model, cluster, now)
            if admission is not None:
                return admission
            waits[model] = cluster.no_room(request, model)
    # The most nodes (an elastic gang prefers its full size), then the least fragmentation.
    best: tuple[tuple[int, float, int, str], tuple[Placement, ...]] | None = None
    for model, trial in trials:
        placements = place(capacity, trial, model, shapes)
        if placements is not None:
            cost = (-len(placements), *weigh(capacity, placements, trial, shapes), model)
            if best is None or cost < best[0]:
                best = (cost, placements)
    if best is not None:
        return Admission(_allocation(request, best[0][3], best[1], now))
    for model, trial in trials:
        admission = _preempt(request, trial, model, cluster, now)
        if admission is not None:
            return admission
        waits[model] = cluster.no_room(request, model)
    if not request.gpu_models:
        for model in models:
            if waits[model].code is ReasonCode.QUOTA:
                admission = _free_quota(request, model, cluster, now)
                if admission is not None:
                    return admission
    if not request.gpu_models and len(waits) > 1:
        return reasons.no_model_fits(dict(sorted(waits.items())))
    return next(iter(waits.values()))


def _trial(request: Request, model: str, cluster: Cluster, now: float) -> Request | PendingReason:
    """The request as ``model``'s quota and reservations admit it, or why they do not. An
    elastic gang takes as many nodes as they leave it, if at least its minimum; placement then
    takes as many of those as fit."""
    capacity, ledger, policy = cluster.capacity, cluster.ledger, cluster.policy
    most = _most_nodes(request, model, ledger)
    if isinstance(most, PendingReason):
        return most
    if request.reservation is not None:
        on_it = _most_on_reservation(request, model, ledger, policy, now)
        if isinstance(on_it, PendingReason):
            return on_it
        most = min(most, on_it)
    held = _held(model, request, ledger, policy, now) if policy.reservations else 0
    if held:
        free = capacity.free_gpus_of([model])
        if not request.fractional:
            most = min(most, (free - held) // request.gpus_per_node)
        if free < held or most < request.least_nodes:
            return reasons.reserved(request, model, held, free, policy)
    if most == request.nodes or request.topology is Topology.SINGLE_NODE:
        return request  # several nodes on a single node never fit, however few
    return replace(request, nodes=most)


def _preempt(
    request: Request, trial: Request, model: str, cluster: Cluster, now: float
) -> Admission | None:
    """The admission of ``trial`` (``request`` as quota and reservations admit it) on
    ``model`` by preemption for capacity, or None."""
    found = preemption.for_capacity(
        trial,
        model,
        cluster.capacity,
        cluster.ledger,
        cluster.running,
        cluster.policy.reservations,
        cluster.shapes,
        now,
    )
    if found is None:
        return None
    placements, victims = found
    return Admission(_allocation(request, model, placements, now), tuple(victims))


def _free_quota(request: Request, model: str, cluster: Cluster, now: float) -> Admission | None:
    """The admission of ``request`` on ``model`` by preemption for quota, or None (and nobody
    is touched). The request must then fit the capacity its victims give back (no preemption
    for capacity on top)."""
    ledger, capacity = cluster.ledger, cluster.capacity
    victims = preemption.for_quota(request, model, ledger, cluster.running)
    if victims is None:
        return None
    for victim in victims:
        ledger.remove(victim)
        capacity.give(victim)
    trial = _trial(request, model, cluster, now)
    placements = (
        None if isinstance(trial, PendingReason) else place(capacity, trial, model, cluster.shapes)
    )
    for victim in victims:
        ledger.add(victim)  # the cycle takes them out of the ledger as it preempts them
        if placements is None:
            capacity.take(victim)
    if placements is None:
        return None
    return Admission(_allocation(request, model, placements, now), tuple(victims), Cause.QUOTA)


def _most_nodes(request: Request, model: str, ledger: QuotaLedger) -> int | PendingReason:
    """The most nodes of the request its queue's and organization's quotas of ``model`` admit
    (down to the gang minimum), or why not even the minimum is."""
    queue, organization = request.queue, request.organization
    for nodes in range(request.nodes, request.least_nodes, -1):
        if ledger.check(queue, model, request.demand_on(nodes), organization) is None:
            return nodes
    quota = ledger.check(queue, model, request.demand_on(request.least_nodes), organization)
    return request.least_nodes if quota is None else quota


def _most_on_reservation(
    request: Request, model: str, ledger: QuotaLedger, policy: Policy, now: float
) -> int | PendingReason:
    """The most nodes of a request on a reservation that its reservation's free GPUs take
    (down to the gang minimum), or why it waits: work on a reservation is billed to the
    reservation, so it runs only in its window, on its model, within its GPUs."""
    reservation = next(
        (
            r
            for r in policy.reservations
            if r.id == request.reservation and r.queue == request.queue
        ),
        None,
    )
    if (
        reservation is None
        or reservation.gpu_model != model
        or not reservation.starts_at <= now < reservation.ends_at
    ):
        return reasons.outside_reservation(request, model, reservation, now)
    used = ledger.on_reservation[reservation.id]
    free = reservation.gpus * WHOLE - used
    most = free // request.demand_on(1)
    if most < request.least_nodes:
        return reasons.reservation_full(request, reservation, used)
    return min(most, request.nodes)


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
