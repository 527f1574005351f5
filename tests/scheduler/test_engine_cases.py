"""The engine on concrete scenarios: the seed article's cases and each policy's."""

from __future__ import annotations

import math

import pytest

from scheduler.engine import (
    Policy,
    QueueConfig,
    ReasonCode,
    Reservation,
    Snapshot,
    Topology,
    schedule,
)
from scheduler.engine.fairshare import DecayedUsage
from tests.builders.engine import job, nodes, running

NOW = 100_000.0


def test_two_plus_two_free_gpus_cannot_run_a_four_gpu_single_node_job() -> None:
    fleet = nodes("n", 2, gpus=4)
    busy = [running("a", "n0", (0, 1)), running("b", "n1", (0, 1))]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)),
        [job("big", 4, topology=Topology.SINGLE_NODE)],
        Policy(),
        NOW,
    )

    reason = decisions.pending["big"]
    assert decisions.allocations == ()
    assert reason.code is ReasonCode.FRAGMENTED
    assert reason.message == "4 free h100 in cluster, at most 2 on one node, needs 4 on one node"


def test_an_eight_gpu_gang_waits_rather_than_take_six() -> None:
    fleet = nodes("n", 2, gpus=4)
    busy = [running("a", "n0", (0,)), running("b", "n1", (0,))]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("gang", 4, nodes=2)], Policy(), NOW
    )

    assert decisions.allocations == ()
    assert decisions.pending["gang"].code is ReasonCode.GANG
    assert "needs 8 h100 at once" in decisions.pending["gang"].message
    assert "6 schedulable" in decisions.pending["gang"].message


def test_a_production_job_preempts_experiments_and_only_as_many_as_it_needs() -> None:
    fleet = nodes("n", 1, gpus=8)
    experiments = [
        running(
            f"exp{i}", "n0", (2 * i, 2 * i + 1), priority=0, preemptible=True, started_at=float(i)
        )
        for i in range(4)
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(experiments)), [job("prod", 4, priority=100)], Policy(), NOW
    )

    assert [a.workload for a in decisions.allocations] == ["prod"]
    victims = sorted(p.victim for p in decisions.preemptions)
    assert len(victims) == 2
    # The most recently started experiments go first.
    assert victims == ["exp2", "exp3"]
    assert set(decisions.allocations[0].placements[0].gpus) == {4, 5, 6, 7}


def test_nothing_is_preempted_when_it_would_not_make_the_job_fit() -> None:
    fleet = nodes("n", 1, gpus=8)
    busy = [running("keep", "n0", (0, 1, 2, 3)), running("exp", "n0", (4, 5), preemptible=True)]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("prod", 8, priority=100)], Policy(), NOW
    )

    assert decisions.preemptions == ()
    assert decisions.pending["prod"].code is ReasonCode.INSUFFICIENT


def test_a_free_gpu_of_the_wrong_model_stays_free() -> None:
    fleet = nodes("l", 1, gpus=4, model="l40s")

    decisions = schedule(Snapshot(tuple(fleet)), [job("j", 1, gpu_models=("h100",))], Policy(), NOW)

    assert decisions.allocations == ()
    assert decisions.pending["j"].code is ReasonCode.NO_MATCHING_MODEL


def test_a_free_gpu_beyond_quota_stays_free() -> None:
    fleet = nodes("n", 1, gpus=8)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 2})})
    busy = [running("a", "n0", (0, 1))]

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), [job("j", 1)], policy, NOW)

    reason = decisions.pending["j"]
    assert reason.code is ReasonCode.QUOTA
    assert reason.message.startswith("queue q uses 2 of 2 h100")


def test_a_queue_borrows_idle_quota_of_its_cohort_within_its_limit() -> None:
    fleet = nodes("n", 1, gpus=8)
    policy = Policy(
        queues={
            "a": QueueConfig("a", cohort="lab", nominal={"h100": 2}, borrowing_limit=3),
            "b": QueueConfig("b", cohort="lab", nominal={"h100": 6}),
        }
    )

    decisions = schedule(
        Snapshot(tuple(fleet)), [job("five", 5, queue="a"), job("six", 6, queue="a")], policy, NOW
    )

    assert [a.workload for a in decisions.allocations] == ["five"]
    assert decisions.pending["six"].code is ReasonCode.QUOTA


def test_a_queue_reclaims_its_nominal_quota_from_a_borrower() -> None:
    fleet = nodes("n", 1, gpus=8)
    policy = Policy(
        queues={
            "a": QueueConfig("a", cohort="lab", nominal={"h100": 4}),
            "b": QueueConfig("b", cohort="lab", nominal={"h100": 4}),
        }
    )
    borrower = [running("b-big", "n0", tuple(range(8)), queue="b", priority=5)]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(borrower)), [job("a-job", 4, queue="a")], policy, NOW
    )

    assert [p.victim for p in decisions.preemptions] == ["b-big"]
    assert decisions.preemptions[0].reason.startswith("reclaim")
    assert [a.workload for a in decisions.allocations] == ["a-job"]


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


def test_a_multi_node_job_stays_in_one_rack_when_one_can_hold_it() -> None:
    fleet = nodes("a", 2, rack="r1") + nodes("b", 3, rack="r2")

    decisions = schedule(Snapshot(tuple(fleet)), [job("gang", 8, nodes=3)], Policy(), NOW)

    racks = {p.node[0] for p in decisions.allocations[0].placements}
    assert racks == {"b"}


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


def test_placement_keeps_whole_nodes_for_typical_large_shapes() -> None:
    """Plain first-fit would put a 1-GPU job on n0; fragmentation-aware placement packs it
    next to the running 1-GPU job so a whole 8-GPU node stays free."""
    fleet = nodes("n", 2, gpus=8)
    busy = [running("small", "n1", (0,))]
    policy = Policy(typical_shapes={(8, 1000, 1): 1.0, (1, 1000, 1): 1.0})

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), [job("one", 1)], policy, NOW)

    assert decisions.allocations[0].placements[0].node == "n1"


def test_fractional_gpus_pack_onto_a_shared_gpu() -> None:
    fleet = nodes("t", 1, gpus=2, model="t4", shareable=True)
    busy = [running("half", "t0", (1,), model="t4", milli=500)]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)),
        [job("quarter", 1, gpu_milli=250, gpu_models=("t4",))],
        Policy(),
        NOW,
    )

    placement = decisions.allocations[0].placements[0]
    assert (placement.gpus, placement.gpu_milli) == ((1,), 250)


def test_backfill_runs_a_short_job_that_ends_before_the_blocked_head_could_start() -> None:
    fleet = nodes("n", 1, gpus=8)
    busy = [running("long", "n0", (0, 1, 2, 3), ends_at=NOW + 3600)]
    pending = [
        job("head", 8, priority=10, submitted_at=NOW),
        job("short", 2, runtime_estimate_s=600, submitted_at=NOW),
        job("too-long", 2, runtime_estimate_s=7200, submitted_at=NOW),
    ]

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), pending, Policy(), NOW)

    assert [a.workload for a in decisions.allocations] == ["short"]
    assert decisions.pending["head"].code is ReasonCode.INSUFFICIENT
    assert decisions.pending["too-long"].code is ReasonCode.BEHIND_HIGHER_PRIORITY


def test_a_reservation_holds_capacity_for_its_owner() -> None:
    fleet = nodes("n", 1, gpus=8)
    policy = Policy(reservations=(Reservation("r1", "owner", "h100", 6, NOW - 10, NOW + 3600),))

    decisions = schedule(
        Snapshot(tuple(fleet)),
        [
            job("other", 4, queue="someone", submitted_at=NOW - 5),
            job("mine", 6, queue="owner", submitted_at=NOW),
        ],
        policy,
        NOW,
    )

    assert decisions.pending["other"].code is ReasonCode.RESERVED
    assert [a.workload for a in decisions.allocations] == ["mine"]


def test_fair_share_serves_the_queue_that_used_less_first() -> None:
    fleet = nodes("n", 1, gpus=1)
    policy = Policy(
        queues={
            "heavy": QueueConfig("heavy", nominal={"h100": 1}),
            "light": QueueConfig("light", nominal={"h100": 1}),
        },
        usage_history={"heavy": 100.0, "light": 1.0},
        aging_priority_per_hour=0.0,
    )

    decisions = schedule(
        Snapshot(tuple(fleet)),
        [
            job("h", 1, queue="heavy", submitted_at=0.0),
            job("l", 1, queue="light", submitted_at=5.0),
        ],
        policy,
        NOW,
    )

    assert [a.workload for a in decisions.allocations] == ["l"]


def test_within_an_hour_of_waiting_fair_share_orders_work_of_one_priority() -> None:
    """Aging in steps of an hour: a job that waited 50 minutes is not ahead of one that waited
    10 when its organization used more, weighed by its queues' weights."""
    fleet = nodes("n", 1, gpus=1)
    policy = Policy(
        queues={
            "heavy": QueueConfig("heavy", nominal={"h100": 1}, organization="big", weight=2.0),
            "light": QueueConfig("light", nominal={"h100": 1}, organization="small"),
        },
        organization_usage={"big": 300.0, "small": 100.0},
        aging_step_s=3600.0,
    )
    pending = [
        job("h", 1, queue="heavy", organization="big", submitted_at=NOW - 50 * 60),
        job("l", 1, queue="light", organization="small", submitted_at=NOW - 10 * 60),
    ]

    decisions = schedule(Snapshot(tuple(fleet)), pending, policy, NOW)

    assert [a.workload for a in decisions.allocations] == ["l"]


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


def test_aging_lifts_a_long_waiting_job_over_a_fresh_higher_priority_one() -> None:
    fleet = nodes("n", 1, gpus=1)
    pending = [
        job("old", 1, priority=0, submitted_at=NOW - 10 * 3600),
        job("new", 1, priority=5, submitted_at=NOW),
    ]

    decisions = schedule(Snapshot(tuple(fleet)), pending, Policy(aging_priority_per_hour=1.0), NOW)

    assert [a.workload for a in decisions.allocations] == ["old"]


def test_an_unschedulable_node_takes_nothing() -> None:
    from dataclasses import replace

    fleet = [replace(node, schedulable=False) for node in nodes("n", 1)]

    decisions = schedule(Snapshot(tuple(fleet)), [job("j", 1)], Policy(), NOW)

    assert decisions.allocations == ()
    assert decisions.pending["j"].code is ReasonCode.INSUFFICIENT


def test_cpu_aware_shapes_keep_gpus_where_cpu_remains() -> None:
    """Both nodes can take the 1-GPU job. On n0 it would leave 2 cores beside 7 free GPUs, so a
    typical 1-GPU job asking for 4 cores could use none of them; on n1 CPU is plentiful."""
    from dataclasses import replace

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


# --- elastic gangs: at least ``min_nodes`` of ``nodes`` -------------------------------------


def test_an_elastic_gang_starts_on_the_nodes_that_fit_when_its_minimum_does() -> None:
    fleet = nodes("n", 4)
    busy = [running("a", "n3", (0,))]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("gang", 8, nodes=4, min_nodes=2)], Policy(), NOW
    )

    (allocation,) = decisions.allocations
    assert [p.node for p in allocation.placements] == ["n0", "n1", "n2"]
    assert allocation.gpu_milli == 24_000


def test_an_elastic_gang_takes_its_full_size_when_it_fits() -> None:
    fleet = nodes("n", 5)

    decisions = schedule(
        Snapshot(tuple(fleet)), [job("gang", 8, nodes=4, min_nodes=2)], Policy(), NOW
    )

    assert len(decisions.allocations[0].placements) == 4


def test_an_elastic_gang_below_its_minimum_waits_whole() -> None:
    fleet = nodes("n", 3)
    busy = [running("a", "n1", (0,)), running("b", "n2", (0,))]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("gang", 8, nodes=4, min_nodes=2)], Policy(), NOW
    )

    reason = decisions.pending["gang"]
    assert decisions.allocations == ()
    assert reason.code is ReasonCode.GANG
    assert reason.message == (
        "needs at least 2 nodes x 8 h100 at once (up to 4); 22 schedulable, 1 nodes can take 8"
    )
    assert reason.figures["min_nodes"] == 2


def test_quota_caps_an_elastic_gang_at_what_it_admits() -> None:
    fleet = nodes("n", 4)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 20})})

    decisions = schedule(
        Snapshot(tuple(fleet)), [job("gang", 8, nodes=4, min_nodes=2)], policy, NOW
    )

    assert len(decisions.allocations[0].placements) == 2


def test_quota_below_the_minimum_keeps_an_elastic_gang_waiting() -> None:
    fleet = nodes("n", 4)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 12})})

    decisions = schedule(
        Snapshot(tuple(fleet)), [job("gang", 8, nodes=4, min_nodes=2)], policy, NOW
    )

    assert decisions.pending["gang"].code is ReasonCode.QUOTA
    assert decisions.pending["gang"].figures["needed"] == 16


def test_preemption_for_an_elastic_gang_stops_at_its_minimum() -> None:
    fleet = nodes("n", 3)
    experiments = [
        running(f"exp{i}", f"n{i}", (0,), preemptible=True, started_at=float(i)) for i in (1, 2)
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(experiments)),
        [job("gang", 8, nodes=3, min_nodes=2, priority=5)],
        Policy(),
        NOW,
    )

    # The most recently started experiment goes; the gang starts on two nodes.
    assert [p.victim for p in decisions.preemptions] == ["exp2"]
    assert [p.node for p in decisions.allocations[0].placements] == ["n0", "n2"]


def test_nothing_is_preempted_when_the_minimum_would_still_not_fit() -> None:
    fleet = nodes("n", 3)
    busy = [
        running("keep1", "n1", (0,)),
        running("keep2", "n2", (0,)),
        running("exp", "n0", (0,), preemptible=True),
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)),
        [job("gang", 8, nodes=3, min_nodes=2, priority=5)],
        Policy(),
        NOW,
    )

    assert decisions.preemptions == ()
    assert decisions.pending["gang"].code is ReasonCode.GANG


def test_a_reservation_leaves_an_elastic_gang_what_it_does_not_hold() -> None:
    fleet = nodes("n", 4)
    policy = Policy(reservations=(Reservation("r1", "owner", "h100", 8, NOW - 10, NOW + 3600),))

    decisions = schedule(
        Snapshot(tuple(fleet)), [job("gang", 8, nodes=4, min_nodes=2, queue="other")], policy, NOW
    )

    assert len(decisions.allocations[0].placements) == 3


# --- any GPU model: the placement that fragments least, across models ----------------------


def test_a_job_for_any_model_goes_where_it_fragments_least_not_first_by_name() -> None:
    """By name the a100 node comes first, but a 1-GPU job there breaks a whole 8-GPU node;
    on the h100 node it fills the last free GPU."""
    fleet = nodes("a", 1, model="a100") + nodes("h", 1, model="h100")
    busy = [running("seven", "h0", tuple(range(7)))]
    policy = Policy(typical_shapes={(8, 1000, 1): 1.0, (1, 1000, 1): 1.0})

    decisions = schedule(Snapshot(tuple(fleet), tuple(busy)), [job("one", 1)], policy, NOW)

    (allocation,) = decisions.allocations
    assert (allocation.gpu_model, allocation.placements[0].node) == ("h100", "h0")
    assert allocation.placements[0].gpus == (7,)


def test_equal_placements_on_two_models_go_to_the_first_by_name() -> None:
    fleet = nodes("h", 1, model="h100") + nodes("a", 1, model="a100")

    decisions = schedule(Snapshot(tuple(fleet)), [job("one", 1)], Policy(), NOW)

    assert decisions.allocations[0].gpu_model == "a100"


def test_a_job_for_any_model_waits_with_every_model_s_reason() -> None:
    fleet = nodes("a", 2, gpus=4, model="a100") + nodes("h", 1, gpus=2, model="h100")
    busy = [running("a", "a0", (0, 1), model="a100"), running("b", "a1", (0, 1), model="a100")]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)),
        [job("big", 4, topology=Topology.SINGLE_NODE)],
        Policy(),
        NOW,
    )

    reason = decisions.pending["big"]
    assert reason.code is ReasonCode.FRAGMENTED
    assert reason.message == (
        "a100: 4 free a100 in cluster, at most 2 on one node, needs 4 on one node;"
        " h100: needs 4 h100, 2 free"
    )
    assert reason.figures["by_model"] == {
        "a100": {"code": "fragmented", "message": reason.message.split("; ")[0][6:]},
        "h100": {"code": "insufficient_capacity", "message": "needs 4 h100, 2 free"},
    }


def test_a_job_for_any_model_preempts_only_when_no_model_fits() -> None:
    """Preempting on the a100 node (first by name) would make it fit; the h100 node has room."""
    fleet = nodes("a", 1, gpus=2, model="a100") + nodes("h", 1, gpus=2, model="h100")
    busy = [running("exp", "a0", (0, 1), model="a100", preemptible=True)]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("two", 2, priority=5)], Policy(), NOW
    )

    assert decisions.preemptions == ()
    assert decisions.allocations[0].gpu_model == "h100"


def test_an_elastic_gang_for_any_model_prefers_the_model_that_holds_it_whole() -> None:
    fleet = nodes("a", 2, model="a100") + nodes("h", 3, model="h100")

    decisions = schedule(
        Snapshot(tuple(fleet)), [job("gang", 8, nodes=3, min_nodes=2)], Policy(), NOW
    )

    (allocation,) = decisions.allocations
    assert (allocation.gpu_model, len(allocation.placements)) == ("h100", 3)


def test_an_elastic_gang_on_a_single_node_still_never_fits() -> None:
    fleet = nodes("n", 2)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})})

    decisions = schedule(
        Snapshot(tuple(fleet)),
        [job("gang", 8, nodes=2, min_nodes=1, topology=Topology.SINGLE_NODE)],
        policy,
        NOW,
    )

    assert decisions.pending["gang"].code is ReasonCode.TOPOLOGY


# --- preemption for quota: a queue's higher-priority work over its own lower-priority work --


def test_higher_priority_work_preempts_its_own_queue_s_work_to_free_quota() -> None:
    """The cluster has room (a whole free node), the queue's quota has none: the two cheapest
    experiments of the queue go, no more."""
    fleet = nodes("n", 2, gpus=8)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})})
    experiments = [
        running(
            f"exp{i}", "n0", (2 * i, 2 * i + 1), priority=0, preemptible=True, started_at=float(i)
        )
        for i in range(4)
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(experiments)), [job("prod", 4, priority=1000)], policy, NOW
    )

    assert [a.workload for a in decisions.allocations] == ["prod"]
    # The most recently started experiments go first.
    assert sorted(p.victim for p in decisions.preemptions) == ["exp2", "exp3"]
    assert {p.reason for p in decisions.preemptions} == {
        "quota of queue q: preempted by higher-priority work of the same queue"
    }
    assert decisions.allocations[0].gpu_milli == 4000


def test_nothing_is_preempted_for_quota_when_it_would_not_free_enough() -> None:
    fleet = nodes("n", 2, gpus=8)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})})
    busy = [
        running("exp", "n0", (0, 1), priority=0, preemptible=True),
        running("keep", "n0", (2, 3, 4, 5)),
        running("peer", "n0", (6, 7), priority=1000, preemptible=True),
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("prod", 4, priority=1000)], policy, NOW
    )

    assert decisions.preemptions == ()
    assert decisions.pending["prod"].code is ReasonCode.QUOTA
    assert decisions.pending["prod"].message.startswith("queue q uses 8 of 8 h100")


def test_work_of_another_queue_is_not_preempted_to_free_quota() -> None:
    fleet = nodes("n", 2, gpus=8)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 8})})
    busy = [
        running("mine", "n0", tuple(range(8))),
        running("theirs", "n1", (0, 1, 2, 3), queue="other", preemptible=True),
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(busy)), [job("prod", 4, priority=1000)], policy, NOW
    )

    assert decisions.preemptions == ()
    assert decisions.pending["prod"].code is ReasonCode.QUOTA


def test_preemption_for_quota_frees_an_elastic_gang_s_minimum() -> None:
    fleet = nodes("n", 4)
    policy = Policy(queues={"q": QueueConfig("q", nominal={"h100": 16})})
    experiments = [
        running(f"exp{i}", f"n{i}", tuple(range(8)), preemptible=True, started_at=float(i))
        for i in range(2)
    ]

    decisions = schedule(
        Snapshot(tuple(fleet), tuple(experiments)),
        [job("gang", 8, nodes=3, min_nodes=1, priority=5)],
        policy,
        NOW,
    )

    assert [p.victim for p in decisions.preemptions] == ["exp1"]
    assert len(decisions.allocations[0].placements) == 1
