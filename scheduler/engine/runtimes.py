"""Runtimes learned from history, for start-time forecasts: how long a workload will really
run, given what it asked for and how long alike work ran before.

Where the figures come from, first that applies:

1. The workload gave a runtime estimate: the estimate times how the project's estimates
   compared with their runs (the median, 10th and 90th percentile of run / estimate), from
   at least ``min_samples`` runs that had an estimate; else the fleet's ratios; else
   ``ESTIMATE_RATIOS`` (users overestimate: half the estimate expected, a fifth to all of it).
2. No estimate: the runs of its array (any number), else of its project and shape, else its
   project, else the fleet (each with at least ``min_samples`` runs): their median, 10th and
   90th percentile.
3. No history at all: ``DEFAULT`` (1 h, from 10 min to 8 h).

A run's duration counts from its start to its end, when it ended by itself (succeeded or
failed), not when it was preempted or cancelled. A workload's ``max_runtime_s`` caps all three.

A workload that has already run ``ran_s`` is like the runs that lasted at least as long: the
figures come from those samples only (the ratios above ``ran_s`` / estimate, or the durations
above ``ran_s``), so work that outlived its expected end is not expected to end at once. When
no sample lasted that long, or with no history, and the figures say it should have ended
already, its runtime is taken as a heavy tail (a Pareto of shape ``OVERRUN_TAIL``, as long
runs' durations usually are): having run t, it is expected to run t x a / (a - 1) in all (1.5 t
at 3), 10th percentile t x 0.9^(-1/a), 90th t x 0.1^(-1/a). Its expected end then moves out
as it runs on, never to now: the waiting work's estimates move with it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from scheduler.engine.forecast import Basis, Runtime
from scheduler.engine.model import Value

DEFAULT: Final = Runtime(
    expected_s=3600.0, low_s=600.0, high_s=8 * 3600.0, basis=Basis.DEFAULT_RUNTIMES
)
ESTIMATE_RATIOS: Final = (0.5, 0.2, 1.0)  # run / estimate: expected, 10th, 90th percentile
OVERRUN_TAIL: Final = 3.0  # the Pareto shape of work that outlived what history says


@dataclass(frozen=True, slots=True)
class RunSample(Value):
    """One finished run: whose, of what shape, in which array, its estimate and duration."""

    project: str
    shape: tuple[int, ...]
    duration_s: float
    estimate_s: float | None = None
    array: str | None = None


@dataclass(frozen=True, slots=True)
class Spread(Value):
    """The median, 10th and 90th percentile of some samples."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls.of_sorted(sorted(values))

    @classmethod
    def of_sorted(cls, ordered: Sequence[float]) -> Spread:
        return cls(_quantile(ordered, 0.5), _quantile(ordered, 0.1), _quantile(ordered, 0.9))

    @classmethod
    def above(cls, ordered: Sequence[float], least: float) -> Spread | None:
        """The spread of the sorted values above ``least`` (None: none is)."""
        rest = ordered[bisect.bisect_right(ordered, least) :]
        return cls.of_sorted(rest) if rest else None


def _quantile(ordered: Sequence[float], q: float) -> float:
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class RuntimeBook:
    """What history says of runtimes, keyed as the rules above read it."""

    def __init__(self, samples: Iterable[RunSample], *, min_samples: int = 3) -> None:
        self.min_samples = min_samples
        durations: dict[tuple[object, ...], list[float]] = {}
        ratios: dict[tuple[object, ...], list[float]] = {}
        for sample in samples:
            keys: list[tuple[object, ...]] = [
                ("project", sample.project, sample.shape),
                ("project", sample.project),
                ("fleet",),
            ]
            if sample.array:
                keys.append(("array", sample.array))
            for key in keys:
                durations.setdefault(key, []).append(sample.duration_s)
            if sample.estimate_s:
                for key in (("project", sample.project), ("fleet",)):
                    ratios.setdefault(key, []).append(sample.duration_s / sample.estimate_s)
        self._durations = {key: sorted(values) for key, values in durations.items()}
        self._ratios = {
            key: sorted(values) for key, values in ratios.items() if len(values) >= min_samples
        }

    def runtime(
        self,
        project: str,
        shape: tuple[int, ...],
        estimate_s: float | None,
        *,
        array: str | None = None,
        max_runtime_s: float | None = None,
        ran_s: float = 0.0,
    ) -> Runtime:
        """The runtime of a workload of ``project`` and ``shape`` that has run ``ran_s`` so far
        (see the module's rules)."""
        if estimate_s:
            ratios = self._ratios.get(("project", project)) or self._ratios.get(("fleet",))
            known = Spread.above(ratios, ran_s / estimate_s) if ratios else None
            median, low, high = (known.median, known.low, known.high) if known else ESTIMATE_RATIOS
            runtime = Runtime(
                estimate_s * median, estimate_s * low, estimate_s * high, Basis.RUNTIME_ESTIMATES
            )
        else:
            runtime = self._learned(project, shape, array, ran_s)
        if ran_s > 0 and runtime.expected_s <= ran_s:
            runtime = _overrun(runtime, ran_s)
        return _within(runtime, ran_s, max_runtime_s or math.inf)

    def _learned(
        self, project: str, shape: tuple[int, ...], array: str | None, ran_s: float
    ) -> Runtime:
        candidates: list[tuple[tuple[object, ...], int]] = [
            (("project", project, shape), self.min_samples),
            (("project", project), self.min_samples),
            (("fleet",), self.min_samples),
        ]
        if array:
            candidates.insert(0, (("array", array), 1))
        for key, least in candidates:
            durations = self._durations.get(key, ())
            if len(durations) >= least:
                spread = Spread.above(durations, ran_s)
                if spread is None:
                    continue  # it outlived every alike run: ask wider history
                return Runtime(spread.median, spread.low, spread.high, Basis.LEARNED_RUNTIMES)
        return DEFAULT


def _overrun(runtime: Runtime, ran_s: float) -> Runtime:
    """The runtime of work that has run ``ran_s``, past its expected end (the module's tail)."""
    tail = OVERRUN_TAIL
    return Runtime(
        ran_s * tail / (tail - 1),
        ran_s * 0.9 ** (-1 / tail),
        ran_s * 0.1 ** (-1 / tail),
        runtime.basis,
    )


def _within(runtime: Runtime, least: float, most: float) -> Runtime:
    """Each figure at least ``least`` (it ran that long) and at most ``most`` (its cap)."""
    return Runtime(
        min(max(runtime.expected_s, least), most),
        min(max(runtime.low_s, least), most),
        min(max(runtime.high_s, least), most),
        runtime.basis,
    )
