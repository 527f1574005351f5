"""For any history of grants and releases (preemptions, double releases in either order,
open allocations, fractional GPUs, times across a month's end), metered usage equals the sum
over allocations of (first release in log order - grant) x GPUs x milli, computed here
independently, per month as well as in total; a replay gives the same rows."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.replay import projections_replay
from metering import selectors
from metering.models import OpenAllocation, UsageSlice, WorkloadTerms
from tests.builders import Builder
from tests.builders.history import Log, catch_up

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

BASE = datetime(2025, 1, 29, tzinfo=UTC)  # three days before January's end
FEBRUARY = datetime(2025, 2, 1, tzinfo=UTC)
WINDOW = (datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC))
DAY_US = 86_400_000_000
ENDINGS = (
    "released",
    "preempted",
    "released_then_preempted",
    "preempted_then_released",
    "released_twice",
    "open",
)


@dataclass(frozen=True)
class Planned:
    start_us: int
    duration_us: int
    placements: list[tuple[int, int]]
    ending: str
    gap_us: int
    late_claim_us: int  # how far before its append a second run end says it ended


allocations = st.lists(
    st.builds(
        Planned,
        start_us=st.integers(0, 5 * DAY_US),
        duration_us=st.one_of(st.integers(0, 3 * DAY_US), st.integers(0, 5_000_000)),
        placements=st.lists(
            st.tuples(st.integers(1, 8), st.sampled_from([1000, 500, 250, 125, 333, 1])),
            min_size=1,
            max_size=3,
        ),
        ending=st.sampled_from(ENDINGS),
        gap_us=st.integers(0, DAY_US),
        late_claim_us=st.integers(0, 2 * DAY_US),
    ),
    min_size=1,
    max_size=6,
)


def _at(micros: int) -> datetime:
    return BASE + timedelta(microseconds=micros)


def _us(at: datetime) -> int:
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _floor_metered(milli: int, granted: datetime, end: datetime) -> int:
    """The reference: an interval rounded once, down, in milli-GPU-seconds."""
    return milli * (_us(end) - _us(granted)) // 1_000_000


def _write(log: Log, plan: list[Planned]) -> list[tuple[int, datetime, datetime]]:
    """Append the history in time order; (milli-GPUs, grant, first release or window end)."""
    steps: list[tuple[int, int, int, str]] = []  # (append instant, order, allocation, what)
    for n, p in enumerate(plan):
        steps += [(p.start_us, 0, n, "submit"), (p.start_us, 1, n, "grant")]
        first = p.start_us + p.duration_us
        if p.ending != "open":
            steps.append((first, 2, n, p.ending.split("_then_")[0].replace("_twice", "")))
        if p.ending in ("released_then_preempted", "preempted_then_released", "released_twice"):
            second = p.ending.split("_then_")[-1].replace("released_twice", "released")
            steps.append((first + p.gap_us, 3, n, f"late_{second}"))
    workload: dict[int, uuid.UUID] = {}
    allocation: dict[int, uuid.UUID] = {}
    first_release: dict[int, datetime] = {}
    for instant, _, n, what in sorted(steps):
        at = _at(instant)
        if what == "submit":
            workload[n] = log.submit(at)
        elif what == "grant":
            allocation[n] = log.grant(workload[n], at, plan[n].placements)
        elif what == "released":
            log.release(workload[n], allocation[n], at)
            first_release[n] = at
        elif what == "preempted":
            log.preempt(workload[n], allocation[n], at)
            first_release[n] = at
        elif what == "late_released":
            # A run end racing a preemption may claim an earlier end: it changes nothing.
            claimed = max(_at(plan[n].start_us), at - timedelta(microseconds=plan[n].late_claim_us))
            log.release(workload[n], allocation[n], at, released_at=claimed)
        else:
            log.preempt(workload[n], allocation[n], at)
    return [
        (
            sum(gpus * milli for gpus, milli in p.placements),
            _at(p.start_us),
            first_release.get(n, WINDOW[1]),
        )
        for n, p in enumerate(plan)
    ]


def _rows() -> dict[str, list[tuple[Any, ...]]]:
    return {
        "terms": sorted(WorkloadTerms.objects.values_list()),
        "open": sorted(OpenAllocation.objects.values_list()),
        "slices": sorted(
            UsageSlice.objects.values_list(*[f.name for f in UsageSlice._meta.fields[1:]])
        ),
    }


names = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=allocations)
def test_metered_usage_is_the_sum_of_first_release_minus_grant(
    build: Builder, plan: list[Planned]
) -> None:
    organization = build.organization(f"Org {next(names)}")
    log = Log(project=build.project(organization), cluster_id=uuid.uuid4())
    intervals = _write(log, plan)
    catch_up()

    lines = selectors.usage_lines(organization.pk, *WINDOW)
    expected_total = sum(_floor_metered(m, g, r) for m, g, r in intervals)
    assert sum(line.milli_gpu_seconds for line in lines) == expected_total

    january = selectors.usage_lines(organization.pk, WINDOW[0], FEBRUARY)
    expected_january = sum(
        _floor_metered(m, g, min(r, FEBRUARY)) for m, g, r in intervals if g < FEBRUARY
    )
    assert sum(line.milli_gpu_seconds for line in january) == expected_january
    february = selectors.usage_lines(organization.pk, FEBRUARY, WINDOW[1])
    assert sum(line.milli_gpu_seconds for line in february) == expected_total - expected_january

    query = selectors.UsageQuery(
        start=WINDOW[0], end=WINDOW[1], group_by=(), organization_id=organization.pk
    )
    daily = selectors.usage_daily(
        slices=UsageSlice.objects.all(),
        open_allocations=OpenAllocation.objects.all(),
        query=query,
        now=datetime.now(UTC),
    )
    assert sum(day["milli_gpu_seconds"] for day in daily) == expected_total

    live = _rows()
    projections_replay(names=["metering.usage"])
    assert _rows() == live
