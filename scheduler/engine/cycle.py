"""One scheduling cycle: ``schedule(snapshot, pending, policy, now) -> Decisions``.

The steps are numbered below; each policy is its own module: the order of the queue
(``ordering``), head-of-line holds and backfill (``backfill``), admission model by model
(``admission``), and preemption (``preemption``). Deterministic: the same inputs give the same
decisions (every tie is broken by name).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from scheduler.engine import backfill, reasons
from scheduler.engine.admission import Admission, Cluster, acceptable_models, admit
from scheduler.engine.backfill import Ending, HeadOfLine
from scheduler.engine.capacity import Capacity
from scheduler.engine.model import (
    Allocation,
    Decisions,
    PendingReason,
    Policy,
    Preemption,
    ReasonCode,
    Request,
    Snapshot,
    Topology,
)
from scheduler.engine.ordering import ordered
from scheduler.engine.placement import Shapes
from scheduler.engine.preemption import ByCost, owns_window, preemption_of
from scheduler.engine.quota import QuotaLedger


def schedule(
    snapshot: Snapshot, pending: Sequence[Request], policy: Policy, now: float
) -> Decisions:
    return Scheduler(snapshot, policy).cycle(pending, now)


# What placement reads of a request: its shape, gang minimum, CPU, memory, topology, nodes.
Fit = tuple[int, int, int, int, int, int, Topology, frozenset[str] | None]


def fit_key(request: Request) -> Fit:
    return (
        request.gpus_per_node,
        request.nodes,
        request.least_nodes,
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        request.topology,
        request.nodes_allowed,
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
        self._ending = Ending(self.running.values())
        self.by_cost = ByCost(self.running.values())
        # Memos. ``_changes`` moves whenever capacity or running work changes for good.
        self._changes = 0
        self._starts: dict[tuple[Fit, tuple[str, ...]], tuple[int, float]] = {}
        self._no_room: dict[tuple[Fit, str], tuple[int, PendingReason]] = {}
        # Capacity with every running workload of these models gone; it moves only when work
        # of other models sits on their nodes (see ``_foreign``).
        self._empty: dict[tuple[str, ...], Capacity] = {}
        self._fits_empty: dict[tuple[Fit, tuple[str, ...]], bool] = {}

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

    def cycle(self, pending: Sequence[Request], now: float, *, in_order: bool = False) -> Decisions:
        """Decide for ``pending`` (see ``schedule``) and apply the decisions. ``in_order``: the
        caller vouches that ``pending`` is in the engine's order at ``now`` already (as
        ``ordered`` gives it), so it is not sorted again."""
        policy = self.policy
        shapes = shapes_of(policy, pending)
        cluster = Cluster(self.capacity, self.ledger, self.by_cost, policy, shapes, self.no_room)
        granted: list[Allocation] = []
        preempted: list[Preemption] = []
        waiting: dict[str, PendingReason] = {}
        head_of_line = HeadOfLine(now, policy.backfill)
        # Only work that ran before this cycle may be preempted: granting and taking back in
        # one cycle would be churn (see ``_run``).
        granted_ids: set[str] = set()
        models_of: dict[tuple[str, ...], tuple[list[str], frozenset[str]]] = {}

        # 2. Order: effective priority (with aging), then fair share, then arrival, then id.
        for request in pending if in_order else ordered(pending, policy, now):
            known = models_of.get(request.gpu_models)
            if known is None:
                models = acceptable_models(request, self._models_in_fleet)
                known = models_of[request.gpu_models] = (models, frozenset(models))
            models, model_set = known
            if not models:
                waiting[request.id] = reasons.no_matching_model(request, Snapshot(self.nodes))
                continue
            # 3. Head-of-line: a workload waiting for capacity holds back later ones that want
            #    the same models, unless they finish (by estimate) before it could start; one
            #    waiting for its queue's quota holds back lower-priority work of its queue.
            behind = head_of_line.holding_back(request, model_set)
            if behind is not None:
                waiting[request.id] = behind
                continue
            # 4. Quota, reservations and placement: model by model in order of preference, or
            #    the least fragmenting of all models for a request that takes any.
            # 5. If nothing fits: preemption, for capacity or for the queue's quota (``admit``
            #    chooses the victims; they are taken back here, then the request is granted).
            outcome = admit(request, models, cluster, now)
            if isinstance(outcome, Admission):
                model = outcome.allocation.gpu_model or ""
                window = owns_window(request, model, policy.reservations, now)
                for victim in outcome.victims:
                    preempted.append(preemption_of(victim, request, outcome.cause, window=window))
                    self._preempted(victim)
                self._grant(outcome.allocation, granted_ids)
                granted.append(outcome.allocation)
                continue
            waiting[request.id] = outcome
            if request.nodes_allowed is not None and outcome.code in reasons.CAPACITY_CODES:
                waiting[request.id] = reasons.volume_locality(request, outcome)
            if outcome.code is ReasonCode.QUOTA:
                head_of_line.waits_for_quota(request, model_set)
            elif outcome.code in reasons.CAPACITY_CODES and self._fits_when_empty(
                request, models, shapes
            ):
                start = self._earliest_start(request, models, shapes)
                head_of_line.waits(request, model_set, start)
        for allocation in granted:
            if self.running.get(allocation.workload) is allocation:
                self.by_cost.add(allocation)
        return Decisions(allocations=tuple(granted), preemptions=tuple(preempted), pending=waiting)

    def _preempted(self, victim: Allocation) -> None:
        """``victim`` is taken back in this cycle (admission gave its capacity back)."""
        self.ledger.remove(victim)
        if self.running.pop(victim.workload, None) is not None:
            self._ending.remove(victim)
            self.by_cost.remove(victim)
        self._moved(victim)

    def _grant(self, allocation: Allocation, granted_ids: set[str]) -> None:
        self.capacity.take(allocation)
        self.ledger.add(allocation)
        self._run(allocation, granted_ids)
        self._moved(allocation)
        granted_ids.add(allocation.workload)

    def _fits_when_empty(self, request: Request, models: list[str], shapes: Shapes) -> bool:
        """Whether running work is what keeps the request out (else it blocks nobody: it waits
        for capacity the cluster does not have).

        Giving back all the running work of ``models`` leaves their nodes as only work of
        other models (there by exception) and the nodes themselves make them, so the answer
        is kept until such work moves. Whether a request fits does not depend on the typical
        shapes (they only rank the nodes it fits)."""
        key = (fit_key(request), tuple(models))
        fits = self._fits_empty.get(key)
        if fits is None:
            empty = self._empty.get(key[1])
            if empty is None:
                empty = self._empty[key[1]] = self._emptied(models)
            fits = self._fits_empty[key] = backfill.fits(empty, request, models, shapes)
        return fits

    def _emptied(self, models: list[str]) -> Capacity:
        mine = [a for a in self.running.values() if a.gpu_model in models]
        return self.capacity.copy(models, give=mine)

    def _earliest_start(self, request: Request, models: list[str], shapes: Shapes) -> float:
        """When the request could start if running work ends as estimated (inf: unknown)."""
        key = (fit_key(request), tuple(models))
        known = self._starts.get(key)
        if known is not None and known[0] == self._changes:
            return known[1]
        ending = self._ending.of(models)
        start = backfill.earliest_start(self.capacity, ending, request, models, shapes)
        self._starts[key] = (self._changes, start)
        return start

    def no_room(self, request: Request, model: str) -> PendingReason:
        """Why the request fits nowhere on ``model`` now (``reasons.no_room``), memoised."""
        key = (fit_key(request), model)
        known = self._no_room.get(key)
        if known is not None and known[0] == self._changes:
            return known[1]
        reason = reasons.no_room(request, model, self.capacity)
        self._no_room[key] = (self._changes, reason)
        return reason


def shapes_of(policy: Policy, pending: Sequence[Request]) -> Shapes:
    """The typical shapes: configured, else learned from what is asked for now."""
    if policy.typical_shapes:
        return policy.typical_shapes
    counts = Counter(request.shape for request in pending)
    return {shape: float(count) for shape, count in counts.items()}
