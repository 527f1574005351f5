"""Start-time forecasts: the engine run forward from a cluster's state, to say when each
waiting workload will start and how sure that is.

The forward run is the engine itself (``Scheduler.cycle``) at instants where running work is
expected to end or a reservation opens or closes: the engine decides with what it will know
then (the users' runtime estimates, for backfill), while the forecast ends each run when its
*expected* runtime says (learned from history, see ``Runtime``). It is run three times: with
every runtime at its expected value (the estimate), at its 10th percentile (the earliest) and
at its 90th (the latest). Each workload's range is the span of its starts in the three runs.

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
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import count

from scheduler.engine import backfill
from scheduler.engine.admission import acceptable_models
from scheduler.engine.capacity import Capacity
from scheduler.engine.cycle import Scheduler, shapes_of
from scheduler.engine.model import Allocation, Policy, ReasonCode, Request, Snapshot
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
class Runtime:
    """How long a workload runs, all told: expected seconds and the 10th and 90th percentile,
    and where the figures come from (a ``Basis`` of runtimes)."""

    expected_s: float
    low_s: float
    high_s: float
    basis: Basis = Basis.DEFAULT_RUNTIMES


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """When a waiting workload is expected to start (``start``, with ``earliest`` and
    ``latest`` the range), or None with ``Basis.NEVER`` / ``Basis.BEYOND_HORIZON``."""

    workload: str
    start: float | None
    earliest: float | None
    latest: float | None
    basis: tuple[Basis, ...]


@dataclass(frozen=True, slots=True)
class Horizon:
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
    their own."""
    never = _never_fits(snapshot, pending, policy)
    # The typical shapes of now, for every cycle ahead (the engine would learn them from what
    # waits, cycle by cycle); the queue in the engine's order of now, which aging keeps.
    policy = replace(policy, typical_shapes=shapes_of(policy, pending))
    line = ordered(pending, policy, now)  # those that never fit stay in it, as in a cycle
    queue, joining = _with_arrivals(line, [a for a in arrivals if a.submitted_at > now], policy)
    runs = {
        scenario: _run_forward(snapshot, queue, joining, policy, now, runtime_of, horizon, scenario)
        for scenario in ("expected_s", "low_s", "high_s")
    }
    expected, low, high = runs["expected_s"], runs["low_s"], runs["high_s"]
    estimates: dict[str, StartEstimate] = {}
    for request in pending:
        if request.id in never:
            estimates[request.id] = StartEstimate(request.id, None, None, None, (Basis.NEVER,))
            continue
        start, waited = expected.starts.get(request.id), expected.waits.get(request.id, set())
        starts = [s for s in (start, low.starts.get(request.id), high.starts.get(request.id))]
        known = [s for s in starts if s is not None]
        basis = [*sorted(expected.runtimes_used), *sorted(waited)]
        if start is None:
            basis.append(Basis.BEYOND_HORIZON)
        elif start <= now:
            basis = [Basis.NOW]
        estimates[request.id] = StartEstimate(
            request.id,
            start,
            min(known) if known else None,
            None if None in starts else max(known),
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
    fits: dict[tuple[object, ...], bool] = {}
    never = set()
    for request in pending:
        models = acceptable_models(request, in_fleet)
        key = (replace(request, id="", queue="", submitted_at=0.0, priority=0), tuple(models))
        if key not in fits:
            fits[key] = bool(models) and backfill.fits(empty, request, models, shapes)
        if not fits[key]:
            never.add(request.id)
    return never


@dataclass
class _Run:
    starts: dict[str, float]
    waits: dict[str, set[Basis]]  # what each workload waited for, cycle by cycle
    runtimes_used: set[Basis]


_WAITS = {
    ReasonCode.RESERVED: Basis.RESERVATION,
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
    scenario: str,
) -> _Run:
    """One forward run with every runtime at ``scenario`` (a field of ``Runtime``); the
    positions of ``joining`` (expected arrivals) join the line at their instants."""
    run = _Run({}, {}, set())
    engine = Scheduler(snapshot, policy)
    ends: list[tuple[float, int, str, Allocation]] = []  # (end, sequence, workload, held)
    held: dict[str, Allocation] = {}
    for allocation in snapshot.allocations:
        runtime = runtime_of(allocation.workload)
        run.runtimes_used.add(runtime.basis)
        end = allocation.started_at + getattr(runtime, scenario)
        ends.append(
            (max(end, now + horizon.min_step_s), len(ends), allocation.workload, allocation)
        )
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
    while waiting and t <= last:
        while join is not None and join[0] <= t:
            bisect.insort(line, join[1])
            join = next(joins, None)
        decisions = engine.cycle([pending[i] for i in line[: horizon.depth]], t)
        for preemption in decisions.preemptions:
            held.pop(preemption.victim, None)  # its end event is now stale
            if preemption.victim in position:  # started by the forecast: it waits again
                bisect.insort(line, position[preemption.victim])
                waiting += position[preemption.victim] not in expected
        for allocation in decisions.allocations:
            at = position[allocation.workload]
            del line[bisect.bisect_left(line, at)]
            waiting -= at not in expected
            run.starts.setdefault(allocation.workload, t)
            runtime = runtime_of(allocation.workload)
            run.runtimes_used.add(runtime.basis)
            held[allocation.workload] = allocation
            end = t + getattr(runtime, scenario)
            heapq.heappush(ends, (end, next(sequence), allocation.workload, allocation))
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
        while ends and ends[0][0] <= t:
            _, _, workload, ended = heapq.heappop(ends)
            if held.get(workload) is ended:  # else preempted since: a stale end
                del held[workload]
                engine.release(ended)
    return run


def _next(times: list[float], after: float) -> float | None:
    return next((x for x in times if x > after), None)
