"""``bench kueue-engine``: the engine alone on ``bench e2e``'s workloads, applying its
decisions as the service does (figures are not asserted: a benchmark measures)."""

from __future__ import annotations

from bench.kueue_engine import engine_alone, fleet, workloads


def test_every_workload_runs_and_a_preempted_one_runs_again_on_capacity_given_back_once() -> None:
    figures = engine_alone(0.04)

    assert figures["engine_preemptions"] > 0  # reclaim: a queue takes back its nominal quota
    assert figures["engine_left_pending"] == 0
    assert figures["engine_runs"] == len(workloads(0.04)) + figures["engine_preemptions"]
    # A victim's GPUs are given back when it is preempted, never again when it would have ended.
    assert figures["engine_free_gpus_at_end"] == 600


def test_the_fleet_and_workloads_are_bench_e2e_s() -> None:
    nodes, policy = fleet()
    planned = workloads(0.004)

    assert sum(node.gpu_count for node in nodes) == 600
    assert len(policy.queues) == 30
    assert {q.borrowing_limit for q in policy.queues.values()} == {100}
    assert len(planned) == 30 * 3
    assert {(r.gpus_per_node, r.nodes, r.priority) for r in planned} == {
        (1, 1, 50),
        (5, 1, 100),
        (4, 5, 200),
    }
