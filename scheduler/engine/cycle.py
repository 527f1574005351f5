"""One scheduling cycle: ``schedule(snapshot, pending, policy, now) -> Decisions``.

Deterministic: the same inputs give the same decisions (every tie is broken by name).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import sub
from typing import Any

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
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    Topology,
)
from scheduler.engine.placement import Shapes, choose_in, place, weigh
from scheduler.engine.quota import QuotaLedger


@dataclass
class _Blocker:
    """A workload that waits for capacity, when it could start by runtime estimates, and the
    reason of those it holds back (one value for all of them)."""

    workload: Request
    models: frozenset[str]
    earliest_start: float
    holds_back: PendingReason


def schedule(
    snapshot: Snapshot, pending: Sequence[Request], policy: Policy, now: float
) -> Decisions:
    return Scheduler(snapshot, policy).cycle(pending, now)


# What placement reads of a request: its shape, gang minimum, CPU, memory and topology.
_Fit = tuple[int, int, int, int, int, int, Topology]


def _fit_key(request: Request) -> _Fit:
    return (
        request.gpus_per_node,
        request.nodes,
        request.least_nodes,
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        request.topology,
    )


class Scheduler:
    """A cluster's capacity, quota usage and running work, kept from one cycle to the next.

    ``cycle(pending, now)`` decides exactly as ``schedule(self.snapshot, pending, policy,
    now)`` would, then applies its decisions (grants run, victims are gone), so the next
    cycle starts where this one ended; ``release`` and ``add`` tell it what ended or started
    between cycles. What it keeps besides the state is only memos of figures that the state
    determines (when a request could start, whether it fits an empty cluster, why it does not
    fit), each valid until the state it was read from changes.

    Workload ids are unique among the allocations (as ``snapshot`` shows them).
    """

    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        # 1. Capacity and quota usage as the snapshot leaves them.
        self.nodes = snapshot.nodes
        self.policy = policy
        self.capacity = Capacity(snapshot)
        self.ledger = QuotaLedger(policy, snapshot.allocations)
        self.running: dict[str, Allocation] = {a.workload: a for a in snapshot.allocations}
        self._models_in_fleet = {n.gpu_model for n in snapshot.nodes if n.gpu_model}
        self._ending = _Ending(self.running.values())
        self.by_cost = _ByCost(self.running.values())
        # Memos. ``_changes`` moves whenever capacity or running work changes for good.
        self._changes = 0
        self._starts: dict[tuple[_Fit, tuple[str, ...]], tuple[int, float]] = {}
        self._no_room: dict[tuple[_Fit, str], tuple[int, PendingReason]] = {}
        # Capacity with every running workload of these models gone; it moves only when work
        # of other models sits on their nodes (see ``_foreign``).
        self._empty: dict[tuple[str, ...], Capacity] = {}
        self._fits_empty: dict[tuple[_Fit, tuple[str, ...]], bool] = {}

    @property
    def snapshot(self) -> Snapshot:
        return Snapshot(self.nodes, tuple(self.running.values()))

    def fair_share(self, queues: Mapping[str, float], organizations: Mapping[str, float]) -> None:
        """Order the next cycles by this decayed usage (the policy's ``usage_history`` and
        ``organization_usage``): it moves with the clock, the rest of the policy does not."""
        self.policy = replace(self.policy, usage_history=queues, organization_usage=organizations)
        self.ledger.policy = self.policy

    def release(self, allocation: Allocation) -> None:
        """``allocation`` ended (or was taken back) since the last cycle."""
        self.capacity.give(allocation)
        self.ledger.remove(allocation)
        if self.running.get(allocation.workload) is allocation:
            del self.running[allocation.workload]
            self._ending.remove(allocation)
            self.by_cost.remove(allocation)
        else:
            self._forget_empty()
        self._moved(allocation)

    def add(self, allocation: Allocation) -> None:
        """``allocation`` started outside the cycle."""
        self.capacity.take(allocation)
        self.ledger.add(allocation)
        self._run(allocation)
        self._moved(allocation)

    def _run(self, allocation: Allocation, granted: set[str] | None = None) -> None:
        """Count ``allocation`` as running. Work ``granted`` in the cycle under way stays out of
        ``by_cost`` until it ends (``cycle`` adds it then): it may not be preempted in it."""
        shadowed = self.running.get(allocation.workload)
        if shadowed is not None:
            self._ending.remove(shadowed)
            if granted is None or shadowed.workload not in granted:
                self.by_cost.remove(shadowed)
            self._forget_empty()
        self.running[allocation.workload] = allocation
        self._ending.add(allocation)
        if granted is None:
            self.by_cost.add(allocation)

    def _moved(self, allocation: Allocation) -> None:
        self._changes += 1
        if self._foreign(allocation):
            self._forget_empty()

    def _foreign(self, allocation: Allocation) -> bool:
        """Whether the allocation sits on a node of another GPU model than its own."""
        nodes = self.capacity.nodes
        return any(
            p.node in nodes and nodes[p.node].gpu_model != allocation.gpu_model
            for p in allocation.placements
        )

    def _forget_empty(self) -> None:
        self._empty.clear()
        self._fits_empty.clear()

    def cycle(self, pending: Sequence[Request], now: float) -> Decisions:
        """Decide for ``pending`` (see ``schedule``) and apply the decisions."""
        capacity, ledger, policy = self.capacity, self.ledger, self.policy
        shapes = _shapes(policy, pending)
        granted: list[Allocation] = []
        preempted: list[Preemption] = []
        waiting: dict[str, PendingReason] = {}
        blockers: list[_Blocker] = []
        # Only work that ran before this cycle may be preempted: granting and taking back in
        # one cycle would be churn (see ``_run``).
        granted_ids: set[str] = set()
        models_of: dict[tuple[str, ...], tuple[list[str], frozenset[str]]] = {}
        # Who holds back requests alike (models, priority, runtime estimate), until the next
        # blocker joins: most of a long queue waits behind the same few.
        held_back: dict[tuple[object, ...], _Blocker | None] = {}

        # 2. Order: effective priority (with aging), then fair share, then arrival, then id.
        for request in _ordered(pending, policy, now):
            known = models_of.get(request.gpu_models)
            if known is None:
                models = _models(request, self._models_in_fleet)
                known = models_of[request.gpu_models] = (models, frozenset(models))
            models, model_set = known
            if not models:
                waiting[request.id] = reasons.no_matching_model(request, Snapshot(self.nodes))
                continue
            # 3. Head-of-line: a workload waiting for capacity holds back later ones that want
            #    the same models, unless they finish (by estimate) before it could start.
            if blockers:
                alike = (request.gpu_models, request.priority, request.runtime_estimate_s)
                if alike in held_back:
                    blocker = held_back[alike]
                else:
                    blocker = held_back[alike] = _blocked_by(
                        request, model_set, blockers, now, policy
                    )
                if blocker is not None:
                    waiting[request.id] = blocker.holds_back
                    continue
            # 4. Quota, reservations and placement: model by model in order of preference, or
            #    the least fragmenting of all models for a request that takes any.
            outcome = _admit(request, models, self, shapes, now)
            if isinstance(outcome, tuple):
                allocation, victims, for_quota = outcome
                for victim in victims:
                    preempted.append(
                        Preemption(
                            victim=victim.workload,
                            for_workload=request.id,
                            reason=_why_preempted(victim, request, for_quota),
                        )
                    )
                    ledger.remove(victim)
                    if self.running.pop(victim.workload, None) is not None:
                        self._ending.remove(victim)
                        self.by_cost.remove(victim)
                    self._moved(victim)
                capacity.take(allocation)
                ledger.add(allocation)
                self._run(allocation, granted_ids)
                self._moved(allocation)
                granted_ids.add(allocation.workload)
                granted.append(allocation)
                continue
            waiting[request.id] = outcome
            if outcome.code in reasons.CAPACITY_CODES and self._fits_when_empty(
                request, models, shapes
            ):
                start = self._earliest_start(request, models, shapes)
                blockers.append(_Blocker(request, model_set, start, reasons.behind(request)))
                held_back.clear()
        for allocation in granted:
            if self.running.get(allocation.workload) is allocation:
                self.by_cost.add(allocation)
        return Decisions(allocations=tuple(granted), preemptions=tuple(preempted), pending=waiting)

    def _fits_when_empty(self, request: Request, models: list[str], shapes: Shapes) -> bool:
        """Whether running work is what keeps the request out (else it blocks nobody: it waits
        for capacity the cluster does not have).

        Giving back all the running work of ``models`` leaves their nodes as only work of
        other models (there by exception) and the nodes themselves make them, so the answer
        is kept until such work moves. Whether a request fits does not depend on the typical
        shapes (they only rank the nodes it fits)."""
        key = (_fit_key(request), tuple(models))
        fits = self._fits_empty.get(key)
        if fits is None:
            empty = self._empty.get(key[1])
            if empty is None:
                empty = self._empty[key[1]] = self._emptied(models)
            fits = any(place(empty, request, model, shapes) is not None for model in models)
            self._fits_empty[key] = fits
        return fits

    def _emptied(self, models: list[str]) -> Capacity:
        mine = [a for a in self.running.values() if a.gpu_model in models]
        return self.capacity.copy(models, give=mine)

    def _earliest_start(self, request: Request, models: list[str], shapes: Shapes) -> float:
        """When the request could start if running work ends as estimated (inf: unknown)."""
        key = (_fit_key(request), tuple(models))
        known = self._starts.get(key)
        if known is not None and known[0] == self._changes:
            return known[1]
        capacity = self.capacity
        released: list[Allocation] = []
        start = float("inf")
        for ends_at, allocation in self._ending.of(models):
            capacity.give(allocation)
            released.append(allocation)
            if any(place(capacity, request, model, shapes) is not None for model in models):
                start = ends_at
                break
        for allocation in released:
            capacity.take(allocation)
        self._starts[key] = (self._changes, start)
        return start

    def no_room(self, request: Request, model: str) -> PendingReason:
        key = (_fit_key(request), model)
        known = self._no_room.get(key)
        if known is not None and known[0] == self._changes:
            return known[1]
        reason = reasons.no_room(request, model, self.capacity)
        self._no_room[key] = (self._changes, reason)
        return reason


class _Ending:
    """Running work with an estimated end, soonest first (then by workload id)."""

    def __init__(self, allocations: Iterable[Allocation]) -> None:
        ending = sorted(((a.ends_at, a.workload), a) for a in allocations if a.ends_at is not None)
        self._keys: list[tuple[float, str]] = [key for key, _ in ending]
        self._allocations: list[Allocation] = [a for _, a in ending]

    def add(self, allocation: Allocation) -> None:
        if allocation.ends_at is None:
            return
        at = bisect.bisect_right(self._keys, (allocation.ends_at, allocation.workload))
        self._keys.insert(at, (allocation.ends_at, allocation.workload))
        self._allocations.insert(at, allocation)

    def remove(self, allocation: Allocation) -> None:
        if allocation.ends_at is None:
            return
        key = (allocation.ends_at, allocation.workload)
        at = bisect.bisect_left(self._keys, key)
        while self._allocations[at] is not allocation:
            at += 1
        del self._keys[at]
        del self._allocations[at]

    def of(self, models: list[str]) -> Iterator[tuple[float, Allocation]]:
        for (ends_at, _), allocation in zip(self._keys, self._allocations, strict=True):
            if allocation.gpu_model in models:
                yield ends_at, allocation


class _ByCost:
    """Running work per GPU model, cheapest to preempt first: lowest priority, then the most
    recently started, then the smallest, then by workload id; and the preemptible part of it
    alone, which is all that priority preemption looks at, also per queue (what preemption
    for quota looks at)."""

    def __init__(self, allocations: Iterable[Allocation]) -> None:
        self._all: dict[str | None, _Sorted] = {}
        self._preemptible: dict[str | None, _Sorted] = {}
        self._preemptible_in: dict[tuple[str, str | None], _Sorted] = {}
        for allocation in allocations:
            self.add(allocation)

    def add(self, allocation: Allocation) -> None:
        model = allocation.gpu_model
        self._all.setdefault(model, _Sorted()).add(allocation)
        if allocation.preemptible:
            self._preemptible.setdefault(model, _Sorted()).add(allocation)
            self._preemptible_in.setdefault((allocation.queue, model), _Sorted()).add(allocation)

    def remove(self, allocation: Allocation) -> None:
        model = allocation.gpu_model
        self._all[model].remove(allocation)
        if allocation.preemptible:
            self._preemptible[model].remove(allocation)
            self._preemptible_in[(allocation.queue, model)].remove(allocation)

    def of(self, model: str) -> list[Allocation]:
        known = self._all.get(model)
        return known.allocations if known else []

    def preemptible_of(self, model: str) -> list[Allocation]:
        known = self._preemptible.get(model)
        return known.allocations if known else []

    def preemptible_in(self, queue: str, model: str) -> list[Allocation]:
        known = self._preemptible_in.get((queue, model))
        return known.allocations if known else []


class _Sorted:
    """Allocations in ``_ByCost`` order, with their keys for bisection."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, float, int, str]] = []
        self.allocations: list[Allocation] = []

    @staticmethod
    def _key(a: Allocation) -> tuple[int, float, int, str]:
        return (a.priority, -a.started_at, a.gpu_milli, a.workload)

    def add(self, allocation: Allocation) -> None:
        key = self._key(allocation)
        at = bisect.bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.allocations.insert(at, allocation)

    def remove(self, allocation: Allocation) -> None:
        at = bisect.bisect_left(self.keys, self._key(allocation))
        while self.allocations[at] is not allocation:
            at += 1
        del self.keys[at]
        del self.allocations[at]


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


# Effective priorities this far apart round apart at 9 decimals: only closer ones need the
# rest of the key to be ordered.
_NEAR = 1e-8


def _ordered(pending: Sequence[Request], policy: Policy, now: float) -> list[Request]:
    """Effective priority (with aging, rounded to 9 decimals), then fair share of the
    organization, then of the queue, then arrival, then id; the same order for the same
    requests in any order.

    Sorted by effective priority alone, then the runs of near-equal ones by the whole key:
    the same order as sorting by the whole key, at a fraction of the cost when aging is
    continuous (with steps, the runs are long: fair share orders them).

    A share is decayed usage over weight (``usage_history`` per queue,
    ``organization_usage`` per organization); an organization weighs as its queues do on
    average (1 without any)."""
    weights = {name: max(q.weight, 1e-9) for name, q in policy.queues.items()}
    organization_weights: dict[str, list[float]] = {}
    for name, config in policy.queues.items():
        organization_weights.setdefault(config.organization, []).append(weights[name])
    history, organization_history = policy.usage_history, policy.organization_usage
    groups = list(dict.fromkeys((r.organization, r.queue) for r in pending))
    shares: dict[tuple[str, str], tuple[float, float]] = {}
    for organization, queue in groups:
        own = organization_weights.get(organization)
        weight = sum(own) / len(own) if own else 1.0
        shares[(organization, queue)] = (
            round(organization_history.get(organization, 0.0) / weight, 9),
            round(history.get(queue, 0.0) / weights.get(queue, 1.0), 9),
        )
    # One rank per (organization, queue) by their shares (equal shares, equal ranks).
    rank_of = {pair: i for i, pair in enumerate(sorted(set(shares.values())))}
    rank: dict[str, dict[str, int]] = {}
    for (organization, queue), pair in shares.items():
        rank.setdefault(organization, {})[queue] = rank_of[pair]
    per_hour, step = policy.aging_priority_per_hour, policy.aging_step_s
    priorities = [
        effective_priority(r.priority, now - r.submitted_at, per_hour, step) for r in pending
    ]
    order = sorted(range(len(pending)), key=priorities.__getitem__, reverse=True)
    descending = [priorities[i] for i in order]
    near = [k for k, gap in enumerate(map(sub, descending, descending[1:])) if gap < _NEAR]

    def key(i: int) -> tuple[float, int, float, str, int]:
        r = pending[i]
        return (-round(priorities[i], 9), rank[r.organization][r.queue], r.submitted_at, r.id, i)

    at = 0
    while at < len(near):  # each run of near-equal priorities: order[start : end + 1]
        start = end = near[at]
        while at + 1 < len(near) and near[at + 1] == end + 1:
            at += 1
            end += 1
        order[start : end + 2] = sorted(order[start : end + 2], key=key)
        at += 1
    return [pending[i] for i in order]


def _blocked_by(
    request: Request, models: frozenset[str], blockers: list[_Blocker], now: float, policy: Policy
) -> _Blocker | None:
    for blocker in blockers:
        if blocker.workload.priority < request.priority or blocker.models.isdisjoint(models):
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
    scheduler: Scheduler,
    shapes: Shapes,
    now: float,
) -> tuple[Allocation, list[Allocation], bool] | PendingReason:
    """An allocation, the victims it needs and whether they go to free its queue's quota; or
    the reason it must wait.

    Acceptable models named: the first, in order of preference, where the request fits (by
    placement, else by preemption: for capacity, or for quota when that is what it lacks).
    Any model: the placement that fragments least across all of them (ties to the model's
    name; an elastic gang's largest first); preemption, in name order, only when none fits:
    for capacity first, then for quota."""
    capacity = scheduler.capacity
    waits: dict[str, PendingReason] = {}  # by model, in the order tried
    trials: list[tuple[str, Request]] = []
    for model in models:
        trial = _trial(request, model, scheduler, now)
        if isinstance(trial, PendingReason):
            waits[model] = trial
            if request.gpu_models and trial.code is ReasonCode.QUOTA:
                found = _free_quota(request, model, scheduler, shapes, now)
                if found is not None:
                    return _allocation(request, model, found[0], now), found[1], True
        elif not request.gpu_models:
            trials.append((model, trial))
        else:
            outcome = _place_or_preempt(trial, model, scheduler, shapes)
            if outcome is not None:
                return _allocation(request, model, outcome[0], now), outcome[1], False
            waits[model] = scheduler.no_room(request, model)
    # The most nodes (an elastic gang prefers its full size), then the least fragmentation.
    best: tuple[tuple[int, float, int, str], tuple[Placement, ...]] | None = None
    for model, trial in trials:
        placements = place(capacity, trial, model, shapes)
        if placements is not None:
            cost = (-len(placements), *weigh(capacity, placements, trial, shapes), model)
            if best is None or cost < best[0]:
                best = (cost, placements)
    if best is not None:
        return _allocation(request, best[0][3], best[1], now), [], False
    for model, trial in trials:
        found = _preempt(trial, model, scheduler, shapes)
        if found is not None:
            return _allocation(request, model, found[0], now), found[1], False
        waits[model] = scheduler.no_room(request, model)
    if not request.gpu_models:
        for model in models:
            if waits[model].code is ReasonCode.QUOTA:
                found = _free_quota(request, model, scheduler, shapes, now)
                if found is not None:
                    return _allocation(request, model, found[0], now), found[1], True
    if not request.gpu_models and len(waits) > 1:
        return reasons.no_model_fits(dict(sorted(waits.items())))
    return next(iter(waits.values()))


def _trial(
    request: Request, model: str, scheduler: Scheduler, now: float
) -> Request | PendingReason:
    """The request as ``model``'s quota and reservations admit it, or why they do not. An
    elastic gang takes as many nodes as they leave it, if at least its minimum; placement then
    takes as many of those as fit."""
    capacity, ledger, policy = scheduler.capacity, scheduler.ledger, scheduler.policy
    most = _most_nodes(request, model, ledger)
    if isinstance(most, PendingReason):
        return most
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


def _place_or_preempt(
    request: Request, model: str, scheduler: Scheduler, shapes: Shapes
) -> tuple[tuple[Placement, ...], list[Allocation]] | None:
    placements = place(scheduler.capacity, request, model, shapes)
    if placements is not None:
        return placements, []
    return _preempt(request, model, scheduler, shapes)


def _free_quota(
    request: Request, model: str, scheduler: Scheduler, shapes: Shapes, now: float
) -> tuple[tuple[Placement, ...], list[Allocation]] | None:
    """Victims whose quota the request takes when its queue's (or its organization's) quota of
    ``model`` keeps it out (Kueue's ``withinClusterQueue: LowerPriority``), and where it then
    lands; or None, and nobody is touched.

    Victims are the queue's own lower-priority preemptible work of ``model`` that ran before
    this cycle, taken cheapest first until the quota admits the request's minimum; then any
    the quota can do without is spared, most valuable first. The request must then fit the
    capacity its victims give back (no preemption for capacity on top)."""
    ledger, capacity = scheduler.ledger, scheduler.capacity
    least = request.demand_on(request.least_nodes)
    queue, organization = request.queue, request.organization
    # Victims leave the ledger as they are taken (their queue's usage and their
    # organization's), and come back when spared.
    victims: list[Allocation] = []
    admitted = False
    for victim in scheduler.by_cost.preemptible_in(queue, model):
        if victim.priority >= request.priority:
            break  # by priority from here on: nobody else is lower
        if victim.workload == request.id:
            continue
        victims.append(victim)
        ledger.remove(victim)
        if ledger.check(queue, model, least, organization) is None:
            admitted = True
            break
    if not admitted:
        for victim in victims:
            ledger.add(victim)
        return None
    needed: list[Allocation] = []
    for victim in reversed(victims):
        ledger.add(victim)
        if ledger.check(queue, model, least, organization) is None:
            continue  # spared
        ledger.remove(victim)
        needed.append(victim)
    victims = needed[::-1]
    for victim in victims:
        capacity.give(victim)
    trial = _trial(request, model, scheduler, now)
    placements = None if isinstance(trial, PendingReason) else place(capacity, trial, model, shapes)
    for victim in victims:
        ledger.add(victim)  # the cycle takes them out of the ledger as it preempts them
        if placements is None:
            capacity.take(victim)
    return None if placements is None else (placements, victims)


def _most_nodes(request: Request, model: str, ledger: QuotaLedger) -> int | PendingReason:
    """The most nodes of the request its queue's and organization's quotas of ``model`` admit
    (down to the gang minimum), or why not even the minimum is."""
    queue, organization = request.queue, request.organization
    for nodes in range(request.nodes, request.least_nodes, -1):
        if ledger.check(queue, model, request.demand_on(nodes), organization) is None:
            return nodes
    quota = ledger.check(queue, model, request.demand_on(request.least_nodes), organization)
    return request.least_nodes if quota is None else quota


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
    request: Request, model: str, ledger: QuotaLedger, by_cost: _ByCost, policy: Policy
) -> Iterator[Allocation]:
    """Who may lose GPUs for ``request``: lower-priority preemptible work; work of queues that
    borrow, when the request stays within its own nominal quota (reclaim); and preemptible work
    on capacity the request's reservation holds. Only work that ran before this cycle (all
    that ``by_cost`` holds while it runs). Cheapest first: lowest priority, then the most
    recently started, then the smallest (the order ``by_cost`` keeps)."""
    least = request.demand_on(request.least_nodes)  # preemption makes room for the minimum
    reclaiming = ledger.within_nominal(request.queue, model, least)
    owns_window = any(
        r.id == request.reservation and r.queue == request.queue for r in policy.reservations
    )
    if not reclaiming and not owns_window:
        for allocation in by_cost.preemptible_of(model):
            if allocation.priority >= request.priority:
                return  # by priority from here on: nobody else is lower
            if allocation.workload != request.id:
                yield allocation
        return
    borrows: dict[str, bool] = {}  # by queue: the ledger does not move while we look
    for allocation in by_cost.of(model):
        if allocation.workload == request.id:
            continue
        if allocation.priority < request.priority and allocation.preemptible:
            yield allocation
            continue
        queue = allocation.queue
        if queue == request.queue:
            continue
        if reclaiming:
            borrower = borrows.get(queue)
            if borrower is None:
                borrower = borrows[queue] = ledger.borrowing(queue, model) > 0
            if borrower:
                yield allocation
                continue
        if owns_window and allocation.preemptible:
            yield allocation  # evictable


def _preempt(
    request: Request, model: str, scheduler: Scheduler, shapes: Shapes
) -> tuple[tuple[Placement, ...], list[Allocation]] | None:
    """The smallest set of victims whose removal lets the request fit, or None (then nobody is
    touched: preempting what would not make it fit is never done).

    Candidates are given back cheapest first until the request fits; then every victim the
    placement can do without is spared, most valuable first. Victims are weighed on a
    ``_Room`` (only their nodes change), and placement runs once on the capacity they leave:
    whether a request fits is what ``place`` decides, not where."""
    if request.nodes != 1 and request.topology is Topology.SINGLE_NODE:
        return None
    capacity, ledger = scheduler.capacity, scheduler.ledger
    room = _Room(capacity, request, model)
    removed: list[Allocation] = []
    for victim in _victim_candidates(request, model, ledger, scheduler.by_cost, scheduler.policy):
        removed.append(victim)
        if room.give(victim):
            break
    else:
        return None
    # Only victims on nodes where the request now fits matter: sparing any other changes
    # nothing (taking work back never makes a node fit).
    pool = {v.workload: v for name in room.fitting for v in room.given_on.get(name, ())}
    needed: set[str] = set()  # ids are unique among running work
    for victim in sorted(pool.values(), key=lambda a: (-a.priority, a.started_at, a.workload)):
        room.shift(victim, -1)
        if not room.fits():
            room.shift(victim, +1)
            needed.add(victim.workload)
    removed = [victim for victim in removed if victim.workload in needed]
    for victim in removed:
        capacity.give(victim)
    placements = place(capacity, request, model, shapes)
    if placements is None:  # the room and placement disagree on what fits: touch nobody
        for victim in removed:
            capacity.take(victim)
        return None
    return placements, removed


class _Room:
    """The nodes of ``model`` where a request fits, as preemption gives victims back (or takes
    them again) on a copy of their nodes' free figures; the cluster's ``Capacity`` is not
    touched. Fits as ``place`` would find: one node, or enough nodes for a gang (in one rack
    for ``same_rack``)."""

    def __init__(self, capacity: Capacity, request: Request, model: str) -> None:
        self.capacity, self.request, self.model = capacity, request, model
        self.cpu, self.memory = request.cpu_milli, request.memory_mib
        self.whole = 0 if request.fractional else request.gpus_per_node
        # Per node given back on: [free milli-GPU per GPU, free CPU, free memory, the node
        # when the request may land on it, else None].
        self.free: dict[str, list[Any]] = {}
        self.given_on: dict[str, list[Allocation]] = {}
        self.fitting: set[str] = set()
        self.per_rack: Counter[str] = Counter()
        if request.nodes > 1:  # a single node does not fit anywhere yet: ``place`` said so
            for state_id, names in capacity.classes(model):
                if choose_in(capacity.states[state_id][0], capacity.nodes[names[0]], request):
                    for name in names:
                        if (
                            capacity.cpu_free[name] >= self.cpu
                            and capacity.memory_free[name] >= self.memory
                        ):
                            self._fit(name, True)

    def _fit(self, name: str, fits: bool) -> None:
        rack = self.capacity.nodes[name].rack
        if fits:
            self.fitting.add(name)
            self.per_rack[rack] += 1
        else:
            self.fitting.discard(name)
            self.per_rack[rack] -= 1

    def give(self, victim: Allocation) -> bool:
        """Give ``victim`` back; whether the request fits now."""
        self.shift(victim, +1)
        for placement in victim.placements:
            self.given_on.setdefault(placement.node, []).append(victim)
        return self.fits()

    def shift(self, allocation: Allocation, sign: int) -> None:
        """Give ``allocation`` back (+1) or take it again (-1)."""
        capacity, room = self.capacity, self.free
        for placement in allocation.placements:
            name = placement.node
            figures = room.get(name)
            if figures is None:
                node = capacity.nodes.get(name)
                if node is None:
                    continue
                host = node.schedulable and node.gpu_model == self.model
                figures = room[name] = [
                    list(capacity.gpu_free[name]),
                    capacity.cpu_free[name],
                    capacity.memory_free[name],
                    node if host else None,
                ]
            free = figures[0]
            milli = sign * placement.gpu_milli
            for index in placement.gpus:
                free[index] += milli
            figures[1] += sign * placement.cpu_milli
            figures[2] += sign * placement.memory_mib
            host = figures[3]
            if host is not None:
                fits = (
                    figures[1] >= self.cpu
                    and figures[2] >= self.memory
                    and free.count(WHOLE) >= self.whole
                    and choose_in(free, host, self.request) is not None
                )
                if fits != (name in self.fitting):
                    self._fit(name, fits)

    def fits(self) -> bool:
        request = self.request
        if request.nodes == 1:
            return bool(self.fitting)
        wanted = request.least_nodes
        if request.topology is Topology.SAME_RACK:
            return any(count >= wanted for count in self.per_rack.values())
        return len(self.fitting) >= wanted


def _why_preempted(victim: Allocation, request: Request, for_quota: bool) -> str:
    if for_quota:
        return (
            f"quota of queue {request.queue}: preempted by higher-priority work of the same queue"
        )
    if victim.priority < request.priority and victim.preemptible:
        return f"priority: {request.id} (priority {request.priority}) needs its GPUs"
    if request.reservation is not None:
        return f"reservation {request.reservation} opened for {request.queue}"
    return f"reclaim: queue {request.queue} takes back its nominal quota"
