"""The engine on concrete scenarios: the seed article's cases and each policy's.

Most are tables of one shape each: a workload that waits and why; one that preempts, whom and
why; one that is granted, and where; several of which some go first. Given the fleet, the
running work, the pending workloads and the policy, ``schedule`` decides at ``NOW``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest

from scheduler.engine import (
    Allocation,
    Decisions,
    Node,
    Policy,
    PreemptionCode,
    QueueConfig,
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    Topology,
    schedule,
)
from scheduler.engine.fairshare import DecayedUsage
from tests.builders.engine import job, nodes, running

NOW = 100_000.0
ALL8 = tuple(range(8))  # every GPU of an 8-GPU node


def _decide(
    fleet: Sequence[Node], busy: Sequence[Allocation], pending: list[Request], policy: Policy
) -> Decisions:
    return schedule(Snapshot(tuple(fleet), tuple(busy)), pending, policy, NOW)


def _placements(allocation: Allocation) -> dict[str, tuple[int, ...]]:
    return {p.node: p.gpus for p in allocation.placements}


# --- a workload that waits, and why -----------------------------------------------------------


@dataclass(frozen=True)
class Waits:
    """It waits with ``code``: its message is ``message`` (when given), starts with ``starts``
    and holds each of ``holds``; its figures include ``figures``. Nothing is granted or
    preempted."""

    code: ReasonCode
    message: str | None = None
    starts: str = ""
    holds: tuple[str, ...] = ()
    figures: Mapping[str, object] = field(default_factory=dict)


WAITS = [
    pytest.param(
        nodes("n", 2, gpus=4),
        [running("a", "n0", (0, 1)), running("b", "n1", (0, 1))],
        job("big", 4, topology=Topology.SINGLE_NODE),
        Policy(),
        Waits(
            ReasonCode.FRAGMENTED,
            "4 free h100 in cluster, at most 2 on one node, needs 4 on one node",
        ),
        id="two-plus-two-free-gpus-cannot-run-a-four-gpu-single-node-job",
    ),
    pytest.param(
        nodes("n", 2, gpus=4),
        [running("a", "n0", (0,)), running("b", "n1", (0,))],
        job("gang", 4, nodes=2),
        Policy(),
        Waits(ReasonCode.GANG, holds=("needs 8 h100 at once", "6 schedulable")),
        id="an-eight-gpu-gang-waits-rather-than-take-six",
    ),
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("keep", "n0", (0, 1, 2, 3)), running("exp", "n0", (4, 5), preemptible=True)],
        job("prod", 8, priority=100),
        Policy(),
        Waits(ReasonCode.INSUFFICIENT),
        id="nothing-is-preempted-when-it-would-not-make-the-job-fit",
    ),
    pytest.param(
        nodes("l", 1, gpus=4, model="l40s"),
        [],
        job("j", 1, gpu_models=("h100",)),
        Policy(),
        Waits(ReasonCode.NO_MATCHING_MODEL),
        id="a-free-gpu-of-the-wrong-model-stays-free",
    ),
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("a", "n0", (0, 1))],
        job("j", 1),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 2})}),
        Waits(ReasonCode.QUOTA, starts="queue q uses 2 of 2 h100"),
        id="a-free-gpu-beyond-quota-stays-free",
    ),
    pytest.param(
        [replace(node, schedulable=False) for node in nodes("n", 1)],
        [],
        job("j", 1),
        Policy(),
        Waits(ReasonCode.INSUFFICIENT),
        id="an-unschedulable-node-takes-nothing",
    ),
    pytest.param(
        nodes("n", 3),
        [running("a", "n1", (0,)), running("b", "n2", (0,))],
        job("gang", 8, nodes=4, min_nodes=2),
        Policy(),
        Waits(
            ReasonCode.GANG,
            "needs at least 2 nodes x 8 h100 at once (up to 4); 22 schedulable, 1 nodes can take 8",
            figures={"min_nodes": 2},
        ),
        id="an-elastic-gang-below-its-minimum-waits-whole",
    ),
    pytest.param(
        nodes("n", 4),
        [],
        job("gang", 8, nodes=4, min_nodes=2),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 12})}),
        Waits(ReasonCode.QUOTA, figures={"needed": 16}),
        id="quota-below-the-minimum-keeps-an-elastic-gang-waiting",
    ),
    pytest.param(
        nodes("n", 3),
        [
            running("keep1", "n1", (0,)),
            running("keep2", "n2", (0,)),
            running("exp", "n0", (0,), preemptible=True),
        ],
        job("gang", 8, nodes=3, min_nodes=2, priority=5),
        Policy(),
        Waits(ReasonCode.GANG),
        id="nothing-is-preempted-when-the-minimum-would-still-not-fit",
    ),
    pytest.param(
        nodes("n", 2),
        [],
        job("gang", 8, nodes=2, min_nodes=1, topology=Topology.SINGLE_NODE),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})}),
        Waits(ReasonCode.TOPOLOGY),
        id="an-elastic-gang-on-a-single-node-still-never-fits",
    ),
    pytest.param(
        nodes("n", 2, gpus=8),
        [
            running("exp", "n0", (0, 1), priority=0, preemptible=True),
            running("keep", "n0", (2, 3, 4, 5)),
            running("peer", "n0", (6, 7), priority=1000, preemptible=True),
        ],
        job("prod", 4, priority=1000),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})}),
        Waits(ReasonCode.QUOTA, starts="queue q uses 8 of 8 h100"),
        id="nothing-is-preempted-for-quota-when-it-would-not-free-enough",
    ),
    pytest.param(
        nodes("n", 2, gpus=8),
        [
            running("mine", "n0", ALL8),
            running("theirs", "n1", (0, 1, 2, 3), queue="other", preemptible=True),
        ],
        job("prod", 4, priority=1000),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})}),
        Waits(ReasonCode.QUOTA),
        id="work-of-another-queue-is-not-preempted-to-free-quota",
    ),
    pytest.param(
        nodes("a", 2, gpus=4, model="a100") + nodes("h", 1, gpus=2, model="h100"),
        [running("a", "a0", (0, 1), model="a100"), running("b", "a1", (0, 1), model="a100")],
        job("big", 4, topology=Topology.SINGLE_NODE),
        Policy(),
        Waits(
            ReasonCode.FRAGMENTED,
            "a100: 4 free a100 in cluster, at most 2 on one node, needs 4 on one node;"
            " h100: needs 4 h100, 2 free",
            figures={
                "by_model": {
                    "a100": {
                        "code": "fragmented",
                        "message": "4 free a100 in cluster, at most 2 on one node, needs 4 on"
                        " one node",
                    },
                    "h100": {"code": "insufficient_capacity", "message": "needs 4 h100, 2 free"},
                }
            },
        ),
        id="a-job-for-any-model-waits-with-every-model-s-reason",
    ),
]


@pytest.mark.parametrize(("fleet", "busy", "workload", "policy", "expected"), WAITS)
def test_a_workload_waits_and_says_why(
    fleet: list[Node], busy: list[Allocation], workload: Request, policy: Policy, expected: Waits
) -> None:
    decisions = _decide(fleet, busy, [workload], policy)

    reason = decisions.pending[workload.id]
    assert decisions.allocations == ()
    assert decisions.preemptions == ()
    assert reason.code is expected.code
    if expected.message is not None:
        assert reason.message == expected.message
    assert reason.message.startswith(expected.starts)
    for part in expected.holds:
        assert part in reason.message
    for name, value in expected.figures.items():
        assert reason.figures[name] == value


# --- a workload that preempts: whom, and why ---------------------------------------------------


@dataclass(frozen=True)
class Preempts:
    """Exactly ``victims`` go, each with ``code`` and ``reason``, and the workload is granted
    where ``lands`` says (node -> GPUs), ``gpu_milli`` in all."""

    victims: list[str]
    code: PreemptionCode
    reason: str
    lands: Mapping[str, tuple[int, ...]]
    gpu_milli: int


def _experiments(count: int) -> list[Allocation]:
    """``count`` preemptible 2-GPU experiments on n0, the later-numbered started later."""
    return [
        running(
            f"exp{i}", "n0", (2 * i, 2 * i + 1), priority=0, preemptible=True, started_at=float(i)
        )
        for i in range(count)
    ]


PREEMPTS = [
    # The most recently started experiments go first, and only as many as it needs.
    pytest.param(
        nodes("n", 1, gpus=8),
        _experiments(4),
        job("prod", 4, priority=100),
        Policy(),
        Preempts(
            ["exp2", "exp3"],
            PreemptionCode.PRIORITY,
            "priority: prod (priority 100) needs its GPUs",
            {"n0": (4, 5, 6, 7)},
            4000,
        ),
        id="a-production-job-preempts-experiments-and-only-as-many-as-it-needs",
    ),
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("b-big", "n0", ALL8, queue="b", priority=5)],
        job("a-job", 4, queue="a"),
        Policy(
            queues={
                "a": QueueConfig("a", cohort="lab", nominal={"h100": 4}),
                "b": QueueConfig("b", cohort="lab", nominal={"h100": 4}),
            }
        ),
        Preempts(
            ["b-big"],
            PreemptionCode.RECLAIM,
            "reclaim: queue a takes back its nominal quota",
            {"n0": (0, 1, 2, 3)},
            4000,
        ),
        id="a-queue-reclaims-its-nominal-quota-from-a-borrower",
    ),
    # Not of lower priority: preempted because it runs on the capacity the window holds.
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("guest", "n0", ALL8, queue="other", preemptible=True)],
        job("mine", 8, queue="owner", reservation="r1"),
        Policy(reservations=(Reservation("r1", "owner", "h100", 8, NOW - 10, NOW + 3600),)),
        Preempts(
            ["guest"],
            PreemptionCode.RESERVATION,
            "reservation r1 opened for owner",
            {"n0": ALL8},
            8000,
        ),
        id="a-reservation-s-owner-evicts-preemptible-work-from-its-window",
    ),
    # The most recently started experiment goes; the gang starts on two nodes.
    pytest.param(
        nodes("n", 3),
        [running(f"exp{i}", f"n{i}", (0,), preemptible=True, started_at=float(i)) for i in (1, 2)],
        job("gang", 8, nodes=3, min_nodes=2, priority=5),
        Policy(),
        Preempts(
            ["exp2"],
            PreemptionCode.PRIORITY,
            "priority: gang (priority 5) needs its GPUs",
            {"n0": ALL8, "n2": ALL8},
            16_000,
        ),
        id="preemption-for-an-elastic-gang-stops-at-its-minimum",
    ),
    # The cluster has room (a whole free node), the queue's quota has none: the two cheapest
    # experiments of the queue go, no more.
    pytest.param(
        nodes("n", 2, gpus=8),
        _experiments(4),
        job("prod", 4, priority=1000),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})}),
        Preempts(
            ["exp2", "exp3"],
            PreemptionCode.QUOTA,
            "quota of queue q: preempted by higher-priority work of the same queue",
            {"n0": (4, 5, 6, 7)},
            4000,
        ),
        id="higher-priority-work-preempts-its-own-queue-s-work-to-free-quota",
    ),
    pytest.param(
        nodes("n", 4),
        [
            running(f"exp{i}", f"n{i}", ALL8, preemptible=True, started_at=float(i))
            for i in range(2)
        ],
        job("gang", 8, nodes=3, min_nodes=1, priority=5),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 16})}),
        Preempts(
            ["exp1"],
            PreemptionCode.QUOTA,
            "quota of queue q: preempted by higher-priority work of the same queue",
            {"n1": ALL8},
            8000,
        ),
        id="preemption-for-quota-frees-an-elastic-gang-s-minimum",
    ),
]


@pytest.mark.parametrize(("fleet", "busy", "workload", "policy", "expected"), PREEMPTS)
def test_a_workload_preempts_the_fewest_victims_and_says_why(
    fleet: list[Node],
    busy: list[Allocation],
    workload: Request,
    policy: Policy,
    expected: Preempts,
) -> None:
    decisions = _decide(fleet, busy, [workload], policy)

    assert [a.workload for a in decisions.allocations] == [workload.id]
    assert sorted(p.victim for p in decisions.preemptions) == expected.victims
    assert {p.for_workload for p in decisions.preemptions} == {workload.id}
    assert {p.code for p in decisions.preemptions} == {expected.code}
    assert {p.reason for p in decisions.preemptions} == {expected.reason}
    assert _placements(decisions.allocations[0]) == expected.lands
    assert decisions.allocations[0].gpu_milli == expected.gpu_milli


# --- a workload that is granted, and where ----------------------------------------------------


@dataclass(frozen=True)
class Lands:
    """It is granted on ``model`` where ``lands`` says (node -> GPUs), ``gpu_milli`` in all;
    nothing is preempted."""

    model: str
    lands: Mapping[str, tuple[int, ...]]
    gpu_milli: int


LANDS = [
    pytest.param(
        nodes("a", 2, rack="r1") + nodes("b", 3, rack="r2"),
        [],
        job("gang", 8, nodes=3),
        Policy(),
        Lands("h100", {"b0": ALL8, "b1": ALL8, "b2": ALL8}, 24_000),
        id="a-multi-node-job-stays-in-one-rack-when-one-can-hold-it",
    ),
    # Plain first-fit would put a 1-GPU job on n0; fragmentation-aware placement packs it next
    # to the running 1-GPU job so a whole 8-GPU node stays free.
    pytest.param(
        nodes("n", 2, gpus=8),
        [running("small", "n1", (0,))],
        job("one", 1),
        Policy(typical_shapes={(8, 1000, 1): 1.0, (1, 1000, 1): 1.0}),
        Lands("h100", {"n1": (1,)}, 1000),
        id="placement-keeps-whole-nodes-for-typical-large-shapes",
    ),
    pytest.param(
        nodes("t", 1, gpus=2, model="t4", shareable=True),
        [running("half", "t0", (1,), model="t4", milli=500)],
        job("quarter", 1, gpu_milli=250, gpu_models=("t4",)),
        Policy(),
        Lands("t4", {"t0": (1,)}, 250),
        id="fractional-gpus-pack-onto-a-shared-gpu",
    ),
    pytest.param(
        nodes("n", 4),
        [running("a", "n3", (0,))],
        job("gang", 8, nodes=4, min_nodes=2),
        Policy(),
        Lands("h100", {"n0": ALL8, "n1": ALL8, "n2": ALL8}, 24_000),
        id="an-elastic-gang-starts-on-the-nodes-that-fit-when-its-minimum-does",
    ),
    pytest.param(
        nodes("n", 5),
        [],
        job("gang", 8, nodes=4, min_nodes=2),
        Policy(),
        Lands("h100", {"n0": ALL8, "n1": ALL8, "n2": ALL8, "n3": ALL8}, 32_000),
        id="an-elastic-gang-takes-its-full-size-when-it-fits",
    ),
    pytest.param(
        nodes("n", 4),
        [],
        job("gang", 8, nodes=4, min_nodes=2),
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 20})}),
        Lands("h100", {"n0": ALL8, "n1": ALL8}, 16_000),
        id="quota-caps-an-elastic-gang-at-what-it-admits",
    ),
    pytest.param(
        nodes("n", 4),
        [],
        job("gang", 8, nodes=4, min_nodes=2, queue="other"),
        Policy(reservations=(Reservation("r1", "owner", "h100", 8, NOW - 10, NOW + 3600),)),
        Lands("h100", {"n0": ALL8, "n1": ALL8, "n2": ALL8}, 24_000),
        id="a-reservation-leaves-an-elastic-gang-what-it-does-not-hold",
    ),
    # By name the a100 node comes first, but a 1-GPU job there breaks a whole 8-GPU node; on
    # the h100 node it fills the last free GPU.
    pytest.param(
        nodes("a", 1, model="a100") + nodes("h", 1, model="h100"),
        [running("seven", "h0", tuple(range(7)))],
        job("one", 1),
        Policy(typical_shapes={(8, 1000, 1): 1.0, (1, 1000, 1): 1.0}),
        Lands("h100", {"h0": (7,)}, 1000),
        id="a-job-for-any-model-goes-where-it-fragments-least-not-first-by-name",
    ),
    pytest.param(
        nodes("h", 1, model="h100") + nodes("a", 1, model="a100"),
        [],
        job("one", 1),
        Policy(),
        Lands("a100", {"a0": (0,)}, 1000),
        id="equal-placements-on-two-models-go-to-the-first-by-name",
    ),
    # Preempting on the a100 node (first by name) would make it fit; the h100 node has room.
    pytest.param(
        nodes("a", 1, gpus=2, model="a100") + nodes("h", 1, gpus=2, model="h100"),
        [running("exp", "a0", (0, 1), model="a100", preemptible=True)],
        job("two", 2, priority=5),
        Policy(),
        Lands("h100", {"h0": (0, 1)}, 2000),
        id="a-job-for-any-model-preempts-only-when-no-model-fits",
    ),
    pytest.param(
        nodes("a", 2, model="a100") + nodes("h", 3, model="h100"),
        [],
        job("gang", 8, nodes=3, min_nodes=2),
        Policy(),
        Lands("h100", {"h0": ALL8, "h1": ALL8, "h2": ALL8}, 24_000),
        id="an-elastic-gang-for-any-model-prefers-the-model-that-holds-it-whole",
    ),
]


@pytest.mark.parametrize(("fleet", "busy", "workload", "policy", "expected"), LANDS)
def test_a_workload_is_granted_where_placement_puts_it(
    fleet: list[Node], busy: list[Allocation], workload: Request, policy: Policy, expected: Lands
) -> None:
    decisions = _decide(fleet, busy, [workload], policy)

    (allocation,) = decisions.allocations
    assert decisions.preemptions == ()
    assert allocation.workload == workload.id
    assert allocation.gpu_model == expected.model
    assert _placements(allocation) == expected.lands
    assert allocation.gpu_milli == expected.gpu_milli


# --- several workloads: who goes first ---------------------------------------------------------


GOES_FIRST = [
    pytest.param(
        nodes("n", 1, gpus=8),
        [],
        [job("five", 5, queue="a"), job("six", 6, queue="a")],
        Policy(
            queues={
                "a": QueueConfig("a", cohort="lab", nominal={"h100": 2}, borrowing_limit=3),
                "b": QueueConfig("b", cohort="lab", nominal={"h100": 6}),
            }
        ),
        ["five"],
        {"six": ReasonCode.QUOTA},
        id="a-queue-borrows-idle-quota-of-its-cohort-within-its-limit",
    ),
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("long", "n0", (0, 1, 2, 3), ends_at=NOW + 3600)],
        [
            job("head", 8, priority=10, submitted_at=NOW),
            job("short", 2, runtime_estimate_s=600, submitted_at=NOW),
            job("too-long", 2, runtime_estimate_s=7200, submitted_at=NOW),
        ],
        Policy(),
        ["short"],
        {"head": ReasonCode.INSUFFICIENT, "too-long": ReasonCode.BEHIND_HIGHER_PRIORITY},
        id="backfill-runs-a-short-job-that-ends-before-the-blocked-head-could-start",
    ),
    pytest.param(
        nodes("n", 1, gpus=8),
        [],
        [
            job("other", 4, queue="someone", submitted_at=NOW - 5),
            job("mine", 6, queue="owner", submitted_at=NOW),
        ],
        Policy(reservations=(Reservation("r1", "owner", "h100", 6, NOW - 10, NOW + 3600),)),
        ["mine"],
        {"other": ReasonCode.RESERVED},
        id="a-reservation-holds-capacity-for-its-owner",
    ),
    pytest.param(
        nodes("n", 1, gpus=1),
        [],
        [
            job("h", 1, queue="heavy", submitted_at=0.0),
            job("l", 1, queue="light", submitted_at=5.0),
        ],
        Policy(
            queues={
                "heavy": QueueConfig("heavy", nominal={"h100": 1}),
                "light": QueueConfig("light", nominal={"h100": 1}),
            },
            usage_history={"heavy": 100.0, "light": 1.0},
            aging_priority_per_hour=0.0,
        ),
        ["l"],
        {"h": ReasonCode.INSUFFICIENT},
        id="fair-share-serves-the-queue-that-used-less-first",
    ),
    # Aging in steps of an hour: a job that waited 50 minutes is not ahead of one that waited
    # 10 when its organization used more, weighed by its queues' weights.
    pytest.param(
        nodes("n", 1, gpus=1),
        [],
        [
            job("h", 1, queue="heavy", organization="big", submitted_at=NOW - 50 * 60),
            job("l", 1, queue="light", organization="small", submitted_at=NOW - 10 * 60),
        ],
        Policy(
            queues={
                "heavy": QueueConfig("heavy", nominal={"h100": 1}, organization="big", weight=2.0),
                "light": QueueConfig("light", nominal={"h100": 1}, organization="small"),
            },
            organization_usage={"big": 300.0, "small": 100.0},
            aging_step_s=3600.0,
        ),
        ["l"],
        {"h": ReasonCode.INSUFFICIENT},
        id="within-an-hour-of-waiting-fair-share-orders-work-of-one-priority",
    ),
    pytest.param(
        nodes("n", 1, gpus=1),
        [],
        [
            job("old", 1, priority=0, submitted_at=NOW - 10 * 3600),
            job("new", 1, priority=5, submitted_at=NOW),
        ],
        Policy(aging_priority_per_hour=1.0),
        ["old"],
        {"new": ReasonCode.INSUFFICIENT},
        id="aging-lifts-a-long-waiting-job-over-a-fresh-higher-priority-one",
    ),
    # The queue has 2 of its 4 GPUs left: the 4-GPU job of priority 10 waits for them, and the
    # 1-GPU job of priority 1 of the same queue waits behind it rather than take them bit by
    # bit; the same job of another queue is not held.
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("a", "n0", (0, 1))],
        [
            job("big", 4, priority=10),
            job("small", 1, priority=1),
            job("other", 1, priority=1, queue="r"),
        ],
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 4})}),
        ["other"],
        {"big": ReasonCode.QUOTA, "small": ReasonCode.BEHIND_HIGHER_PRIORITY},
        id="lower-priority-work-waits-behind-its-queue-s-work-waiting-for-quota",
    ),
    pytest.param(
        nodes("n", 1, gpus=8),
        [running("a", "n0", (0, 1))],
        [job("big", 4, priority=10), job("small", 1, priority=10)],
        Policy(queues={"q": QueueConfig("q", nominal={"h100": 4})}),
        ["small"],
        {"big": ReasonCode.QUOTA},
        id="work-of-the-same-priority-is-not-held-for-quota",
    ),
]


@pytest.mark.parametrize(("fleet", "busy", "pending", "policy", "granted", "waiting"), GOES_FIRST)
def test_who_goes_first(
    fleet: list[Node],
    busy: list[Allocation],
    pending: list[Request],
    policy: Policy,
    granted: list[str],
    waiting: dict[str, ReasonCode],
) -> None:
    decisions = _decide(fleet, busy, pending, policy)

    assert [a.workload for a in decisions.allocations] == granted
    assert {w: reason.code for w, reason in decisions.pending.items()} == waiting


# --- scenarios of their own shape --------------------------------------------------------------


def test_single_node_and_nvlink_domain_requirements() -> None:
    fleet = nodes("n", 1, gpus=8, domains=2)  # two NVLink domains of 4 GPUs
    busy = [running("a", "n0", (0,)), running("b", "n0", (4,))]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)),
        [
            job("nv", 4, topology=Topology.SAME_NVLINK_DOMAIN),
            job("three", 3, topology=Topology.SAME_NVLINK_DOMAIN, priority=1),
        ],
        Policy(),
        NOW,
    )

    assert decisions.pending["nv"].code is ReasonCode.INSUFFICIENT
    assert decisions.allocations[0].workload == "three"
    assert set(decisions.allocations[0].placements[0].gpus) in ({1, 2, 3}, {5, 6, 7})


def test_same_rack_is_refused_rather_than_spread() -> None:
    fleet = nodes("a", 2, rack="r1") + nodes("b", 2, rack="r2")

    decisions = schedule(
        Snapshot(tuple(fleet)),
        [
            job("gang", 8, nodes=3, topology=Topology.SAME_RACK),
            job("spread", 8, nodes=3, queue="other", priority=1),
        ],
        Policy(),
        NOW,
    )

    assert decisions.pending["gang"].code is ReasonCode.GANG
    assert {p.node[0] for p in decisions.allocations[0].placements} == {"a", "b"}


def test_cpu_aware_shapes_keep_gpus_where_cpu_remains() -> None:
    """Both nodes can take the 1-GPU job. On n0 it would leave 2 cores beside 7 free GPUs, so a
    typical 1-GPU job asking for 4 cores could use none of them; on n1 CPU is plentiful."""
    fleet = [
        replace(n, cpu_milli=cpu) for n, cpu in zip(nodes("n", 2), (6_000, 64_000), strict=True)
    ]
    gpu_only = Policy(typical_shapes={(1, 1000, 1): 1.0})
    cpu_aware = Policy(typical_shapes={(1, 1000, 1, 4_000): 1.0})
    request = [job("j", 1, cpu_milli=4_000)]

    by_gpu = schedule(Snapshot(tuple(fleet)), request, gpu_only, NOW)
    by_cpu = schedule(Snapshot(tuple(fleet)), request, cpu_aware, NOW)

    assert by_gpu.allocations[0].placements[0].node == "n0"  # ties go to the name
    assert by_cpu.allocations[0].placements[0].node == "n1"


def test_decayed_usage_is_two_figures_per_key_whatever_the_order_of_its_events() -> None:
    """One GPU held for one half-life counts (1 - 1/2) / ln 2 GPU-hours per hour of half-life
    at its end; starts and stops told late correct the total."""
    half_life = 3600.0
    in_order = DecayedUsage(half_life)
    in_order.start("q", 1000, 0.0)
    in_order.stop("q", 1000, half_life)
    late = DecayedUsage(half_life)
    late.start("other", 1000, 2 * half_life)  # moves nothing of "q"
    late.as_of(2 * half_life)
    late.stop("q", 1000, half_life)
    late.start("q", 1000, 0.0)

    expected = 1000 * 0.5 / math.log(2) / 2  # decayed once more to 2 half-lives
    assert in_order.as_of(2 * half_life)["q"] == pytest.approx(expected)
    assert late.as_of(2 * half_life)["q"] == pytest.approx(expected)
    assert "q" not in in_order.as_of(1e9)  # decayed to nothing: forgotten
