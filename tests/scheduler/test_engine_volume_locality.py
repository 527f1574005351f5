"""Data locality in the engine (issue 32): work held to some nodes (``nodes_allowed``, where
its local volume's data lives) goes only there, and waits with ``volume_locality`` when they
are full, even with room elsewhere."""

from __future__ import annotations

from scheduler.engine import Policy, ReasonCode, Snapshot, schedule
from tests.builders.engine import job, nodes, running

NOW = 1_000.0


def test_work_held_to_a_node_goes_there_though_another_is_preferred() -> None:
    fleet = nodes("n", 2)
    # n0 is the tighter fit (best-fit would pick it): 4 of its GPUs are busy.
    busy = [running("other", "n0", (0, 1, 2, 3))]
    pending = [job("train", 2, nodes_allowed=frozenset({"n1"}))]

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), pending, Policy(), NOW)

    (granted,) = decisions.allocations
    assert [p.node for p in granted.placements] == ["n1"]


def test_work_held_to_a_full_node_waits_for_it_with_its_own_reason() -> None:
    fleet = nodes("n", 2)
    busy = [running("other", "n1", tuple(range(8)))]
    pending = [job("train", 2, nodes_allowed=frozenset({"n1"}))]

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), pending, Policy(), NOW)

    assert decisions.allocations == ()
    reason = decisions.pending["train"]
    assert reason.code is ReasonCode.VOLUME_LOCALITY
    assert reason.message.startswith("waits for n1, where its volume's data lives")
    assert reason.figures["nodes"] == ["n1"]


def test_the_same_shape_without_a_node_bound_is_not_held_by_the_bound_ones_memo() -> None:
    fleet = nodes("n", 2)
    busy = [running("other", "n1", tuple(range(8)))]
    pending = [
        job("held", 2, nodes_allowed=frozenset({"n1"})),
        job("free", 2, runtime_estimate_s=10.0),
    ]

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), pending, Policy(), NOW)

    assert [a.workload for a in decisions.allocations] == ["free"]
    assert decisions.pending["held"].code is ReasonCode.VOLUME_LOCALITY
