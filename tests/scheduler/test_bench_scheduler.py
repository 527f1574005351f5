"""The scheduler benchmark suite, and the stateful ``Scheduler`` it measures: the same decisions
as ``schedule()`` on the same inputs, cycle after cycle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.first_fit import first_fit, grouped_first_fit
from bench.scheduler import scheduler as scheduler_suite
from scheduler.engine import Allocation, Decisions, Node, Policy, Request, Snapshot, schedule
from scheduler.engine.cycle import Scheduler
from tests.strategies import NOW, SETTINGS, fleets, policies, requests, scenarios


def test_the_suite_reports_its_figures_against_the_baseline() -> None:
    result = scheduler_suite(0.02)

    assert result["suite"] == "scheduler"
    figures = result["figures"]
    for key in (
        "full_cycle_ms",
        "incremental_cycle_ms",
        "steady_cycle_ms",
        "decisions_per_s",
        "baseline_decisions_per_s",
        "grouped_baseline_decisions_per_s",
        "allocations",
        "pending",
    ):
        assert figures[key] > 0, key
    assert figures["same_decisions_as_schedule"] is True
    assert figures["baselines_place_alike"] is True
    assert figures["grouped_baseline_allocations"] == figures["baseline_allocations"]
    assert result["ratios"]["decisions_vs_baseline"] > 0
    assert result["ratios"]["decisions_vs_grouped_baseline"] > 0
    assert result["peak_rss_mb"] > 0
    assert set(result["machine"]) == {"cpus", "python"}


@SETTINGS
@given(scenarios())
def test_first_fit_by_groups_of_nodes_places_as_first_fit_node_by_node(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    # given any cluster with running work, and pending workloads
    snapshot, pending, _policy = scenario

    # when both baselines place them
    grouped = grouped_first_fit(snapshot, pending)

    # then grouping nodes changes no placement
    assert grouped == first_fit(snapshot, pending)


def _after(allocations: tuple[Allocation, ...], decisions: Decisions) -> list[Allocation]:
    victims = {p.victim for p in decisions.preemptions}
    return [a for a in allocations if a.workload not in victims] + list(decisions.allocations)


@SETTINGS
@given(fleets(), policies(), requests("old"), requests("new"), st.data())
def test_a_scheduler_kept_across_cycles_decides_as_schedule_does(
    fleet: tuple[Node, ...],
    policy: Policy,
    old: list[Request],
    new: list[Request],
    data: st.DataObject,
) -> None:
    # given a scheduler that ran one cycle
    engine = Scheduler(Snapshot(fleet), policy)
    first = engine.cycle(old, NOW - 1000)
    assert first == schedule(Snapshot(fleet), old, policy, NOW - 1000)
    allocations = _after((), first)
    # when some of that work ends, and the waiting and new work is scheduled again, twice
    for _ in range(data.draw(st.integers(0, len(allocations)))):
        ended = allocations.pop(data.draw(st.integers(0, len(allocations) - 1)))
        engine.release(ended)
    waiting = [r for r in old if r.id in first.pending] + new
    second = engine.cycle(waiting, NOW)
    third_pending = [r for r in waiting if r.id in second.pending]
    expected_second = schedule(Snapshot(fleet, tuple(allocations)), waiting, policy, NOW)
    allocations = _after(tuple(allocations), second)
    third = engine.cycle(third_pending, NOW + 60)

    # then every cycle decides exactly as a fresh schedule() on the same inputs
    assert second == expected_second
    assert sorted(a.workload for a in engine.snapshot.allocations) == sorted(
        a.workload for a in _after(tuple(allocations), third)
    )
    assert third == schedule(Snapshot(fleet, tuple(allocations)), third_pending, policy, NOW + 60)


def test_work_added_between_cycles_is_accounted_for() -> None:
    # given a one-node cluster whose scheduler learns of work started outside a cycle
    fleet = (Node("n0", "h100", (0, 0, 0, 0), 96_000, 1_048_576),)
    engine = Scheduler(Snapshot(fleet), Policy())
    first = engine.cycle([Request("a", "q", gpus_per_node=2)], NOW)
    (granted,) = first.allocations
    engine.release(granted)
    engine.add(granted)

    # when a job wants three GPUs
    decisions = engine.cycle([Request("b", "q", gpus_per_node=3)], NOW)

    # then it waits, as schedule() says on the same snapshot
    assert decisions == schedule(
        Snapshot(fleet, (granted,)), [Request("b", "q", gpus_per_node=3)], Policy(), NOW
    )
    assert decisions.allocations == ()
