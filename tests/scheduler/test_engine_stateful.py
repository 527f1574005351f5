"""The stateful ``Scheduler``: kept across any sequence of releases, outside starts and cycles,
it decides exactly as a from-scratch ``schedule()`` on the same snapshot."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import Allocation, Node, Policy, Request, Snapshot, schedule
from scheduler.engine.cycle import Scheduler
from tests.strategies import NOW, SETTINGS, fleets, policies, requests


def _by_workload(allocations: list[Allocation] | tuple[Allocation, ...]) -> list[Allocation]:
    return sorted(allocations, key=lambda a: a.workload)


@SETTINGS
@given(fleets(), policies(), requests("w"), st.data())
def test_a_scheduler_decides_as_schedule_after_any_releases_starts_and_cycles(
    fleet: tuple[Node, ...], policy: Policy, first: list[Request], data: st.DataObject
) -> None:
    # given a scheduler and, beside it, the snapshot it should stand for
    engine = Scheduler(Snapshot(fleet), policy)
    allocations: list[Allocation] = []
    pending = first
    now = NOW - 7200
    for step in range(data.draw(st.integers(1, 8), label="steps")):
        action = data.draw(st.sampled_from(["release", "add", "cycle", "cycle"]), label="action")
        if action == "release" and allocations:
            # when work ends
            ended = allocations.pop(data.draw(st.integers(0, len(allocations) - 1)))
            engine.release(ended)
        elif action == "add" and pending:
            # when work starts outside a cycle (where a cycle would have put it)
            outside = pending[data.draw(st.integers(0, len(pending) - 1))]
            placed = schedule(Snapshot(fleet, tuple(allocations)), [outside], policy, now)
            if placed.allocations and not placed.preemptions:
                engine.add(placed.allocations[0])
                allocations.append(placed.allocations[0])
                pending = [r for r in pending if r.id != outside.id]
        elif action == "cycle":
            # when a cycle runs, some time later, with the waiting work and new work
            now += data.draw(st.sampled_from([0.0, 1.0, 60.0, 3600.0]), label="elapsed")
            arrived = data.draw(requests(f"s{step}-"), label="arrived")
            pending = pending + arrived
            expected = schedule(Snapshot(fleet, tuple(allocations)), pending, policy, now)
            decisions = engine.cycle(pending, now)

            # then it decides as schedule() does, and keeps the snapshot that follows
            assert decisions == expected
            victims = {p.victim for p in decisions.preemptions}
            allocations = [a for a in allocations if a.workload not in victims]
            allocations += decisions.allocations
            pending = [r for r in pending if r.id in decisions.pending]
        assert _by_workload(engine.snapshot.allocations) == _by_workload(allocations)
