"""Start-time estimates measured in time mode: the engine's forecast beside two baselines, each
made on the simulator's live state and compared with when the workload really started.

When estimates are made: for every workload still waiting after the cycle of its arrival
(work that starts in that cycle never waits, so never gets an estimate), once then (the
headline figures), and again at every multiple of ``every_s`` of simulated time while it waits
(the re-estimates, reported apart). All three estimators answer at the same instants:

- ``engine``: ``forecast()`` with runtimes from a ``RuntimeBook`` of the runs that have ended
  so far in the simulation (the users' estimates and real durations), as the service learns
  from its log, and the arrivals ``expected_arrivals`` expects from the submissions seen so far
  (``outlook``; None: no arrivals expected), never from the workload's future jobs;
- ``depth_rate``: now + the waiting workloads ahead of it in the engine's order / the recent
  admission rate (grants in the last hour; all grants so far when none in that hour), what a
  Kueue user computes from the queue position;
- ``backfill_plan``: the same ``forecast()`` with every runtime the user's estimate taken at
  face value: Slurm's ``squeue --start``, computed by the same engine (priorities, quota,
  preemption and placement alike), so it differs from ``engine`` only in the runtimes.

For bounds, not estimates, ``engine`` can be told what no estimator knows (``knows_arrivals``:
the workload's real future submissions instead of the expected ones; ``knows_runtimes``: each
job's real runtime): how far each unknown alone keeps the forecast from the truth.

Each estimate is compared with the workload's first start: within max(60 s, 20 % of the wait
from the estimate's instant to that start), within 60 s, and the absolute error. An estimate
of no time (beyond the horizon) misses with an infinite error; workloads that never started
are left out (nothing to compare with).
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from scheduler.engine.arrivals import Outlook, expected_arrivals
from scheduler.engine.forecast import Basis, Horizon, Runtime, forecast
from scheduler.engine.model import Policy, Request, Snapshot
from scheduler.engine.ordering import ordered
from scheduler.engine.runtimes import RunSample, RuntimeBook
from scheduler.simulator.timed import Decided
from scheduler.simulator.workload import Job, Workload

ESTIMATORS = ("engine", "depth_rate", "backfill_plan")
RATE_WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class Made:
    """The three estimators' answers for one waiting workload at one instant."""

    workload: str
    at: float
    at_submission: bool
    engine: float | None
    depth_rate: float | None
    backfill_plan: float | None


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How a set of estimates compared with the real starts."""

    count: int
    within_share: float  # within max(60 s, 20 % of the wait)
    within_60s_share: float
    median_abs_error_s: float  # inf when more than half had no time

    def as_json(self) -> dict[str, object]:
        median = self.median_abs_error_s
        return {
            "count": self.count,
            "within_share": round(self.within_share, 4),
            "within_60s_share": round(self.within_60s_share, 4),
            "median_abs_error_s": round(median, 1) if math.isfinite(median) else None,
        }


def accuracy(pairs: Sequence[tuple[float | None, float, float]]) -> Accuracy:
    """``pairs`` of (estimate, real start, instant the estimate was made)."""
    if not pairs:
        return Accuracy(0, 0.0, 0.0, 0.0)
    errors, within = [], 0
    for estimate, start, at in pairs:
        error = math.inf if estimate is None else abs(estimate - start)
        errors.append(error)
        within += error <= max(60.0, 0.2 * (start - at))
    finite = sum(e <= 60.0 for e in errors)
    errors.sort()
    middle = errors[(len(errors) - 1) // 2 : len(errors) // 2 + 1]  # one or two
    median = sum(middle) / len(middle)  # inf when a miss is among them
    return Accuracy(len(pairs), within / len(pairs), finite / len(pairs), median)


def depth_rate(position: int, admissions_s: Sequence[float], now: float) -> float | None:
    """now + ``position`` (workloads ahead) / the admission rate, from the grants at
    ``admissions_s`` (in order, none after ``now``): those of the last hour, else all so far;
    None when nothing was ever admitted."""
    recent = len(admissions_s) - bisect.bisect_right(admissions_s, now - RATE_WINDOW_S)
    if recent:
        return now + position * RATE_WINDOW_S / recent
    if admissions_s and now > 0:
        return now + position * now / len(admissions_s)
    return None


def face_value(request: Request) -> Runtime:
    """The user's estimate taken as the runtime, no range (the backfill plan's view)."""
    estimate = request.runtime_estimate_s or 0.0
    return Runtime(estimate, estimate, estimate, Basis.RUNTIME_ESTIMATES)


@dataclass
class Estimates:
    """An ``Observer`` of the engine's run that makes and keeps the estimates (see the module's
    docstring)."""

    workload: Workload
    every_s: float = 300.0
    horizon: Horizon = field(default_factory=Horizon)
    outlook: Outlook | None = field(default_factory=Outlook)
    # Bounds, not estimators: the engine's estimator told what no estimator can know, the
    # workload's real future submissions (instead of the outlook's) and every job's real
    # runtime, to measure how far each unknown alone keeps the estimates from the truth.
    knows_arrivals: bool = False
    knows_runtimes: bool = False
    made: list[Made] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)  # first starts
    forecast_s: float = 0.0  # CPU time in the two forecasts
    forecasts: int = 0

    def __post_init__(self) -> None:
        self._jobs = {job.request.id: job for job in self.workload.jobs}
        self._samples: list[RunSample] = []
        self._book = RuntimeBook(())
        self._book_size = 0
        self._admissions: list[float] = []
        self._seen: set[str] = set()
        self._submitted: list[Request] = []  # the submissions seen, of the outlook's window
        self._since: float | None = None  # the first instant observed
        self._state: tuple[Snapshot, list[Request], Policy] | None = None
        self._tick = self.every_s

    # --- the observer --------------------------------------------------------------------

    def passing(self, last: float, now: float) -> None:
        if self._state is None or not self._state[1]:
            self._tick = max(self._tick, math.floor(now / self.every_s) * self.every_s)
        while self._tick < now:
            if self._tick > last and self._state is not None and self._state[1]:
                snapshot, pending, policy = self._state
                self._estimate(self._tick, snapshot, pending, policy, [], at_submission=False)
            self._tick += self.every_s

    def ended(self, job: Job, now: float) -> None:
        request = job.request
        self._samples.append(
            RunSample(request.project, request.shape, job.runtime_s, request.runtime_estimate_s)
        )

    def decided(self, instant: Decided) -> None:
        now, snapshot, policy = instant.now, instant.snapshot, instant.policy
        if self._since is None:
            self._since = now
        for allocation in instant.granted:
            self.started.setdefault(allocation.workload, now)
            if allocation.workload not in self._seen:  # started in its arrival's cycle
                self._submitted.append(self._jobs[allocation.workload].request)
            self._seen.add(allocation.workload)
            self._admissions.append(now)
        requests = [job.request for job in instant.pending]
        self._state = (snapshot, requests, policy)
        arrived = [r.id for r in requests if r.id not in self._seen]
        self._submitted += [r for r in requests if r.id not in self._seen]
        self._seen.update(arrived)
        if arrived:
            self._estimate(now, snapshot, requests, policy, arrived, at_submission=True)

    # --- estimating ----------------------------------------------------------------------

    def _estimate(
        self,
        now: float,
        snapshot: Snapshot,
        pending: list[Request],
        policy: Policy,
        which: list[str],
        *,
        at_submission: bool,
    ) -> None:
        """The three estimates of ``which`` (all of ``pending`` when empty) at ``now``."""
        started = time.process_time()
        book = self._learned()
        jobs = self._jobs
        ran = {a.workload: now - a.started_at for a in snapshot.allocations}
        arrivals = self._expected(now, pending)
        expected = {a.id: a for a in arrivals}

        def learned(workload: str) -> Runtime:
            if self.knows_runtimes and workload in jobs:  # an expected arrival is not a job
                real = jobs[workload].runtime_s
                return Runtime(real, real, real, Basis.LEARNED_RUNTIMES)
            request = expected[workload] if workload in expected else jobs[workload].request
            return book.runtime(
                request.project,
                request.shape,
                request.runtime_estimate_s,
                ran_s=ran.get(workload, 0.0),
            )

        engine = forecast(snapshot, pending, policy, now, learned, self.horizon, arrivals)
        plan = forecast(
            snapshot,
            pending,
            policy,
            now,
            lambda workload: face_value(jobs[workload].request),
            self.horizon,
        )
        self.forecast_s += time.process_time() - started
        self.forecasts += 1
        position = {r.id: i for i, r in enumerate(ordered(pending, policy, now))}
        for workload in which or [r.id for r in pending]:
            self.made.append(
                Made(
                    workload,
                    now,
                    at_submission,
                    engine[workload].start,
                    depth_rate(position[workload], self._admissions, now),
                    plan[workload].start,
                )
            )

    def _expected(self, now: float, pending: list[Request]) -> list[Request]:
        """The arrivals expected after ``now`` from the submissions seen so far: those of a
        priority at least the lowest waiting one (the others queue behind all of it)."""
        if self.knows_arrivals:
            return [job.request for job in self.workload.jobs if job.arrival_s > now]
        if self.outlook is None or not pending or self._since is None:
            return []
        # What is older than the window is never replayed again: it is forgotten, so what is
        # kept does not grow with the run.
        window_start = now - self.outlook.window_s
        self._submitted = [r for r in self._submitted if r.submitted_at > window_start]
        return expected_arrivals(
            self._submitted,
            now,
            self.outlook,
            known_since=self._since,
            min_priority=min(r.priority for r in pending),
        )

    def _learned(self) -> RuntimeBook:
        if self._book_size != len(self._samples):
            self._book = RuntimeBook(self._samples)
            self._book_size = len(self._samples)
        return self._book

    # --- figures -------------------------------------------------------------------------

    def figures(self, *, at_submission: bool) -> dict[str, Accuracy]:
        """Each estimator's accuracy over the estimates at submission, or the re-estimates."""
        made = [
            m for m in self.made if m.at_submission is at_submission and m.workload in self.started
        ]
        return {
            name: accuracy([(getattr(m, name), self.started[m.workload], m.at) for m in made])
            for name in ESTIMATORS
        }

    def as_json(self) -> dict[str, object]:
        """``estimates`` (the engine's) and ``baselines``, at submission, with the
        re-estimates under ``re_estimates``."""
        first, again = self.figures(at_submission=True), self.figures(at_submission=False)
        never = {m.workload for m in self.made if m.workload not in self.started}
        waited = {m.workload for m in self.made if m.at_submission}
        return {
            "estimates": {
                **first["engine"].as_json(),
                "re_estimates": again["engine"].as_json(),
                "every_s": self.every_s,
                "waited": len(waited),
                "started_at_once": len(self.started) - len(waited - never),
                "never_started": len(never),
                "forecasts": self.forecasts,
                "forecast_cpu_s": round(self.forecast_s, 2),
                "arrivals": None if self.outlook is None else asdict(self.outlook),
                "knows": [k for k in ("arrivals", "runtimes") if getattr(self, f"knows_{k}")],
            },
            "baselines": {
                name: {**first[name].as_json(), "re_estimates": again[name].as_json()}
                for name in ("depth_rate", "backfill_plan")
            },
        }
