"""Start-time forecasts: the engine run forward from a cluster's state, to say when each
waiting workload will start and how sure that is.

The forward run is the engine itself (``Scheduler.cycle``) at instants where running work is
expected to end or a reservation opens or closes: the engine decides with what it will know
then (the users' runtime estimates, for backfill), while the forecast ends each run when its
*expected* runtime says (learned from history, see ``Runtime``). It is run once, with every
runtime at its expected value (the estimate). The range comes from the same run, as a critical
path method would: each start waited for the latest end given back before it (its
predecessor), so its earliest start is its predecessor's end with every runtime along that
chain at its 10th percentile, and its latest with them at the 90th. Three forward runs (one per
percentile) cost three times as much; the chain leaves out how the order would change if all
the work ran short or long (the engine might then fit others first).

Instants further out are grouped: the engine runs at the next instant work ends, or later by
``step(t)`` = max(``min_step_s``, ``step_share`` of the time ahead of ``now``), whichever is
later, and everything that ended meanwhile is given back at once. An estimate 2 h out is
then late by at most ``step_share`` x 2 h (6 min at 5 %), which keeps a forecast of a long
queue to a few hundred cycles.

Work submitted later is known only as the caller expects it (``arrivals``, e.g. from
``arrivals.expected_arrivals``): each expected arrival joins the waiting line at its
``submitted_at`` (an instant of the forward run, grouped as the others), where the engine would
order it then, and gets no estimate of its own.

What it leaves out: fair-share usage stays as it is now (it moves with the work the forecast
runs); preempted running work is not run again (only work the forecast itself started and then
preempted goes back to the queue).
"""

from __future__ import annotations

import bisect
import enum
import gc
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import count
from typing import Final

from scheduler.engine import backfill
from scheduler.engine.admission import acceptable_models
from scheduler.engine.capacity import Capacity
from scheduler.engine.cycle import Fit, Scheduler, fit_key, shapes_of
from scheduler.engine.model import Allocation, Policy, ReasonCode, Request, Snapshot, Value
from scheduler.engine.ordering import ordered


class Basis(enum.StrEnum):
    """What an estimate rests on (each estimate names all that apply)."""

    RUNTIME_ESTIMATES = "runtime_estimates"  # users' estimates of the work ahead, corrected
    LEARNED_RUNTIMES = "learned_runtimes"  # runtimes learned from history (no estimate given)
    DEFAULT_RUNTIMES = "default_runtimes"  # neither: the fleet-wide fallback
    RESERVATION = "reservation"  # it waits for a reservation's window
    HEAD_OF_LINE = "head_of_line"  # it waits behind a workload held at the head of the line
    QUOTA = "quota"  # it waits for its queue's quota
    NOW = "now"  # it would start in the next cycle
    NEVER = "never"  # nothing in the cluster could ever hold it
    BEYOND_HORIZON = "beyond_horizon"  # not started within the forecast's horizon


@dataclass(frozen=True, slots=True)
class Runtime(Value):
    """How long a workload runs, all told: expected seconds and the 10th and 90th percentile,
    and where the figures come from (a ``Basis`` of runtimes)."""

    expected_s: float
    low_s: float
    high_s: float
    basis: Basis = Basis.DEFAULT_RUNTIMES


@dataclass(frozen=True, slots=True)
class StartEstimate(Value):
    """When a waiting workload is expected to start (``start``, with ``earliest`` and
    ``latest`` the range), or None with ``Basis.NEVER`` / ``Basis.BEYOND_HORIZON``."""

    workload: str
    start: float | None
    earliest: float | None
    latest: float | None
    basis: tuple[Basis, ...]


@dataclass(frozen=True, slots=True)
class Horizon(Value):
    """How far and how finely the forecast runs (see the module's docstring)."""

    max_s: float = 7 * 24 * 3600.0
    min_step_s: float = 10.0
    step_share: float = 0.05
    depth: int = 1000  # the waiting workloads each forward cycle considers, in the engine's order


RuntimeOf = Callable[[str], Runtime]


def forecast(
    snapshot: Snapshot,
    pending: Sequence[Request],
    policy: Policy,
    now: float,
    runtime_of: RuntimeOf,
    horizon: Horizon = Horizon(),
    arrivals: Sequence[Request] = (),
) -> dict[str, StartEstimate]:
    """An estimate for every workload of ``pending``; ``runtime_of(workload)`` gives the total
    runtime of each pending, running and expected workload (a running one ends at its start
    plus that, or soon after now when it has already run longer). ``arrivals``: the work
    expected to be submitted after ``now`` (those at or before it are ignored), with ids of
    their own.

    The cyclic garbage collector is paused meanwhile (as Mercurial's ``nogc`` pauses it while
    it builds large structures): a forecast allocates millions of small objects, and reference
    counting frees nearly all of them, but the collections they would set off walk the whole
    heap, the snapshot's thousands of requests and allocations included (twice in ``bench
    estimates``' forecast, a fifth of its time), for a few thousand objects in cycles. Those
    are collected as usual after it."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _estimates(snapshot, pending, policy, now, runtime_of, horizon, arrivals)
    finally:
        if collecting:
            gc.enable()


def _estimates(
    snapshot: Snapshot,
    pending: Sequence[Request],
    policy: Policy,
    now: float,
    runtime_of: RuntimeOf,
    horizon: Horizon,
    arrivals: Sequence[Request],
) -> dict[str, StartEstimate]:
    never = _never_fits(snapshot, pending, policy)
    # The typical shapes of now, for every cycle ahead (the engine would learn them from what
    # waits, cycle by cycle); the queue in the engine's order of now, which aging keeps.
    policy = replace(policy, typical_shapes=shapes_of(policy, pending))
    line = ordered(pending, policy, now)  # those that never fit stay in it, as in a cycle
    queue, joining = _with_arrivals(line, [a for a in arrivals if a.submitted_at > now], policy)
    run = _run_forward(snapshot, queue, joining, policy, now, runtime_of, horizon)
    earliest, latest = run.chains.starts("low_s"), run.chains.starts("high_s")
    last = now + horizon.max_s
    estimates: dict[str, StartEstimate] = {}
    for request in pending:
        if request.id in never:
            estimates[request.id] = StartEstimate(request.id, None, None, None, (Basis.NEVER,))
            continue
        start, waited = run.starts.get(request.id), run.waits.get(request.id, set())
        basis = [*sorted(run.runtimes_used), *sorted(waited)]
        low = high = None
        if start is None:
            basis.append(Basis.BEYOND_HORIZON)
        else:
            link = run.first[request.id]
            low, high = min(earliest[link], start), max(latest[link], start)
            if start <= now:
                basis = [Basis.NOW]
        estimates[request.id] = StartEstimate(
            request.id,
            start,
            low,
            None if high is None or high > last else high,
            tuple(dict.fromkeys(basis)),
        )
    return estimates


def _with_arrivals(
    line: list[Request], arrivals: list[Request], policy: Policy
) -> tuple[list[Request], list[tuple[float, int]]]:
    """The line (in the engine's order of now) with each arrival after the waiting workload it
    follows in the engine's order once all have arrived (with continuous aging, the order at
    any instant all of them wait), and the arrivals' (instant, position) in time order."""
    if not arrivals:
        return line, []
    known = {r.id for r in line}
    if len(known | {a.id for a in arrivals}) != len(known) + len(arrivals):
        raise ValueError("an expected arrival's id is not its own")
    after: list[list[Request]] = [[] for _ in range(len(line) + 1)]
    follows = 0  # how many waiting workloads are ahead
    for request in ordered([*line, *arrivals], policy, max(a.submitted_at for a in arrivals)):
        if request.id in known:
            follows += 1
        else:
            after[follows].append(request)
    queue = [*after[0]]
    for waiting, behind in zip(line, after[1:], strict=True):
        queue += [waiting, *behind]
    joining = sorted((r.submitted_at, i) for i, r in enumerate(queue) if r.id not in known)
    return queue, joining


def _never_fits(snapshot: Snapshot, pending: Sequence[Request], policy: Policy) -> set[str]:
    """The workloads that fit no acceptable model of an empty fleet (its schedulable nodes)."""
    nodes = tuple(n for n in snapshot.nodes if n.schedulable)
    in_fleet = {n.gpu_model for n in nodes if n.gpu_model}
    empty = Capacity(Snapshot(nodes))
    shapes = shapes_of(policy, pending)
    fits: dict[tuple[Fit, tuple[str, ...]], bool] = {}
    never = set()
    for request in pending:
        models = acceptable_models(request, in_fleet)
        key = (fit_key(request), tuple(models))
        if key not in fits:
            fits[key] = bool(models) and backfill.fits(empty, request, models, shapes)
        if not fits[key]:
            never.add(request.id)
    return never


@dataclass
class _Chains:
    """What each start of the forward run waited for: the end given back last before it.

    A link is a running allocation (it ends at its start plus its runtime, not before the
    forecast's first step) or a grant (it starts ``slack`` after its predecessor's end, the
    instants' grouping, or at a fixed time with none: the first cycle, a reservation's window),
    so the starts and ends of a chain can be worked out again at any percentile.
    """

    runtimes: list[Runtime]
    predecessor: list[int]  # -1: a running allocation, -2: a grant with none
    offset: list[float]  # a running allocation's start; a grant's slack, or fixed start
    floor: float  # no running allocation ends before this

    def running(self, started_at: float, runtime: Runtime) -> int:
        return self._add(runtime, -1, started_at)

    def granted(self, runtime: Runtime, after: tuple[int, float] | None, at: float) -> int:
        if after is None:
            return self._add(runtime, -2, at)
        link, end = after
        return self._add(runtime, link, at - end)

    def _add(self, runtime: Runtime, predecessor: int, offset: float) -> int:
        self.runtimes.append(runtime)
        self.predecessor.append(predecessor)
        self.offset.append(offset)
        return len(self.runtimes) - 1

    def starts(self, scenario: str) -> list[float]:
        """Each link's start with every runtime at ``scenario`` (a field of ``Runtime``), in
        one pass: a predecessor always comes before what waited for it."""
        starts: list[float] = []
        ends: list[float] = []
        for runtime, predecessor, offset in zip(
            self.runtimes, self.predecessor, self.offset, strict=True
        ):
            seconds = getattr(runtime, scenario)
            if predecessor == -1:
                starts.append(offset)
                ends.append(max(offset + seconds, self.floor))
                continue
            start = offset if predecessor == -2 else ends[predecessor] + offset
            starts.append(start)
            ends.append(start + seconds)
        return starts


@dataclass
class _Run:
    starts: dict[str, float]
    first: dict[str, int]  # each workload's first start, a link of ``chains``
    waits: dict[str, set[Basis]]  # what each workload waited for, cycle by cycle
    runtimes_used: set[Basis]
    chains: _Chains


_WAITS: Final = {
    ReasonCode.RESERVED: Basis.RESERVATION,
    ReasonCode.OUTSIDE_RESERVATION: Basis.RESERVATION,
    ReasonCode.RESERVATION_FULL: Basis.RESERVATION,
    ReasonCode.BEHIND_HIGHER_PRIORITY: Basis.HEAD_OF_LINE,
    ReasonCode.QUOTA: Basis.QUOTA,
}


def _run_forward(
    snapshot: Snapshot,
    pending: Sequence[Request],
    joining: list[tuple[float, int]],
    policy: Policy,
    now: float,
    runtime_of: RuntimeOf,
    horizon: Horizon,
) -> _Run:
    """The forward run with every runtime at its expected value; the positions of ``joining``
    (expected arrivals) join the line at their instants."""
    floor = now + horizon.min_step_s
    run = _Run({}, {}, {}, set(), _Chains([], [], [], floor))
    engine = Scheduler(snapshot, policy)
    # (end, sequence, workload, held, link): the heap of expected ends
    ends: list[tuple[float, int, str, Allocation, int]] = []
    held: dict[str, Allocation] = {}
    for allocation in snapshot.allocations:
        runtime = runtime_of(allocation.workload)
        run.runtimes_used.add(runtime.basis)
        end = max(allocation.started_at + runtime.expected_s, floor)
        link = run.chains.running(allocation.started_at, runtime)
        ends.append((end, len(ends), allocation.workload, allocation, link))
        held[allocation.workload] = allocation
    heapq.heapify(ends)
    sequence = count(len(ends))
    opens = sorted({t for r in policy.reservations for t in (r.starts_at, r.ends_at) if t > now})
    # The waiting line: positions in the engine's order, kept sorted; expected arrivals are
    # not in it yet, and once only they wait, the run is over.
    expected = {i for _, i in joining}
    line = [i for i in range(len(pending)) if i not in expected]
    waiting = len(line)
    position = {r.id: i for i, r in enumerate(pending)}
    joins = iter(joining)
    join = next(joins, None)
    t, last = now, now + horizon.max_s
    # With aging continuous (or none) and fair share frozen, every waiting workload gains
    # alike as time passes: the line of now is the engine's order at every instant, and the
    # cycles need not sort it again (near-ties within the 9 decimals ``ordered`` rounds
    # effective priority to stay in the order of now).
    still = policy.aging_step_s <= 0
    after: tuple[int, float] | None = None  # the end given back last before this instant
    while waiting and t <= last:
        while join is not None and join[0] <= t:
            bisect.insort(line, join[1])
            join = next(joins, None)
        decisions = engine.cycle([pending[i] for i in line[: horizon.depth]], t, in_order=still)
        for preemption in decisions.preemptions:
            held.pop(preemption.victim, None)  # its end event is now stale
            if preemption.victim in position:  # started by the forecast: it waits again
                bisect.insort(line, position[preemption.victim])
                waiting += position[preemption.victim] not in expected
        for allocation in decisions.allocations:
            workload = allocation.workload
            at = position[workload]
            del line[bisect.bisect_left(line, at)]
            waiting -= at not in expected
            runtime = runtime_of(workload)
            run.runtimes_used.add(runtime.basis)
            link = run.chains.granted(runtime, after, t)
            if workload not in run.starts:
                run.starts[workload], run.first[workload] = t, link
            held[workload] = allocation
            end = t + runtime.expected_s
            heapq.heappush(ends, (end, next(sequence), workload, allocation, link))
        for workload, reason in decisions.pending.items():
            basis = _WAITS.get(reason.code)
            if basis is not None:
                run.waits.setdefault(workload, set()).add(basis)
        upcoming = [
            e
            for e in (ends[0][0] if ends else None, _next(opens, t), join[0] if join else None)
            if e is not None
        ]
        if not upcoming:
            break  # nothing will ever change: the rest waits for good
        t = max(min(upcoming), t + max(horizon.min_step_s, horizon.step_share * (t - now)))
        after = None
        while ends and ends[0][0] <= t:
            end, _, workload, ended, link = heapq.heappop(ends)
            if held.get(workload) is ended:  # else preempted since: a stale end
                del held[workload]
                engine.release(ended)
                after = (link, end)
    return run


def _next(times: list[float], after: float) -> float | None:
    return next((x for x in times if x > after), None)
