"""The trace simulator: fill mode (the ATC'23 protocol) and time mode, on small inputs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import WHOLE, Allocation, Node, Request, Snapshot
from scheduler.engine.placement import fragmentation
from scheduler.simulator import atc23, fill, timed, trace, workload
from scheduler.simulator.placers import POLICIES, make_placer

BUNDLED_NODES = trace.BUNDLED / trace.NODE_FILE
BUNDLED_PODS = trace.BUNDLED / trace.pod_file("default")


def _fleet() -> tuple[Node, ...]:
    return tuple(
        Node(
            name=f"n{i}",
            gpu_model="t4" if i % 2 else "g2",
            gpu_domains=tuple(range(4)),
            cpu_milli=32_000,
            memory_mib=131_072,
            shareable=True,
        )
        for i in range(6)
    )


def _pods() -> list[Request]:
    shapes = [(1, 250), (1, 500), (1, 1000), (2, 1000), (4, 1000), (0, WHOLE), (1, 810)]
    return [
        Request(
            id=f"p{i}",
            queue="trace",
            gpus_per_node=gpus,
            gpu_milli=milli,
            cpu_milli=2_000 + 1_000 * (i % 5),
            memory_mib=8_192,
            gpu_models=("t4",) if i % 7 == 3 else (),
        )
        for i, (gpus, milli) in enumerate(shapes * 6)
    ]


def _replay(nodes: tuple[Node, ...], policy: str, seed: int) -> tuple[Capacity, list[Allocation]]:
    """Replays a fill run, keeping every allocation, to check what it did."""
    requests = _pods()
    target = fill.target_milli(nodes, 1.3)
    stream = fill.arrival_stream(requests, target, seed)
    placer = make_placer(policy, nodes, fill.typical_shapes(requests), seed)
    capacity = Capacity(Snapshot(nodes))
    allocations = []
    arrived = 0
    for request in stream:
        if arrived >= target:
            break
        placements = placer(capacity, request)
        if placements is not None:
            allocation = Allocation(request.id, request.queue, None, placements)
            capacity.take(allocation)
            allocations.append(allocation)
        arrived += request.gpu_demand_milli
    return capacity, allocations


# --- fill mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_fill_never_allocates_beyond_any_node_and_honours_models(policy: str) -> None:
    nodes = _fleet()
    by_name = {n.name: n for n in nodes}
    wanted = {r.id: r for r in _pods()}

    capacity, allocations = _replay(nodes, policy, seed=7)

    for name, node in by_name.items():
        free = capacity.free[name]
        assert all(0 <= share <= WHOLE for share in free.gpus)
        assert 0 <= free.cpu <= node.cpu_milli
        assert 0 <= free.memory <= node.memory_mib
    per_gpu: dict[tuple[str, int], int] = defaultdict(int)
    for allocation in allocations:
        request = wanted[allocation.workload.split("#")[0]]
        (placement,) = allocation.placements
        assert len(placement.gpus) == request.gpus_per_node
        if request.gpu_models:
            assert by_name[placement.node].gpu_model in request.gpu_models
        for gpu in placement.gpus:
            per_gpu[(placement.node, gpu)] += placement.gpu_milli
    assert all(milli <= WHOLE for milli in per_gpu.values())


def test_fill_stops_once_the_arrivals_level_is_reached() -> None:
    nodes = _fleet()
    requests = _pods()
    target = fill.target_milli(nodes, 1.3)

    stream = fill.arrival_stream(requests, target, seed=3)
    run = fill.fill_once("first-fit", nodes, stream, fill.typical_shapes(requests), target, 3)

    demands = [r.gpu_demand_milli for r in stream]
    last = run.placed + run.skipped - 1  # the index of the last pod that arrived
    arrived_before_last = sum(demands[:last])
    assert sum(demands) >= target  # the list was inflated to reach 130 %
    assert arrived_before_last < target <= arrived_before_last + demands[last]
    assert max(run.curve) == 130
    assert sorted(run.curve) == list(range(131))
    assert run.curve[0] == 100.0
    assert 0.0 <= run.unallocated_gpu_pct <= 100.0


def test_typical_shapes_lose_the_gpus_a_node_cannot_feed_with_cpu() -> None:
    """A node's CPU feeds so many tasks of a shape: the free GPU beyond them is lost to it, as
    GPUs short of a multi-GPU shape's group are."""
    requests = [
        Request(id="whole", queue="q", gpus_per_node=1, cpu_milli=10_000),
        Request(id="pair", queue="q", gpus_per_node=2, cpu_milli=4_000),
        Request(id="share", queue="q", gpus_per_node=1, gpu_milli=400, cpu_milli=5_000),
    ]
    shapes = fill.typical_shapes(requests)
    assert shapes == {(1, 400, 1, 5_000): 1.0, (1, 1000, 1, 10_000): 1.0, (2, 1000, 1, 4_000): 1.0}
    free = [WHOLE, WHOLE, WHOLE, 500]

    # Plenty of CPU: the pair loses the odd whole GPU and the half one; the share loses nothing.
    assert fragmentation(free, shapes, 100_000) == pytest.approx((500 + 1500 + 0) / 3)
    # 12 cores: one whole task, one pair, two shares (on the roomiest GPUs).
    assert fragmentation(free, shapes, 12_000) == pytest.approx((2500 + 1500 + 1500) / 3)
    # 3 cores: nothing lands.
    assert fragmentation(free, shapes, 3_000) == pytest.approx(3500)


def test_multi_gpu_shapes_keep_each_cpu_their_pods_ask_for() -> None:
    """An 8-GPU pod of 120 cores fits only nodes with that CPU: it stays a shape of its own
    beside the 88-core ones instead of vanishing into their median; shapes of one GPU keep
    the median CPU of their pods."""
    requests = [
        *(Request(id=f"big{i}", queue="q", gpus_per_node=8, cpu_milli=88_000) for i in range(3)),
        Request(id="huge", queue="q", gpus_per_node=8, cpu_milli=120_000),
        *(
            Request(id=f"one{i}", queue="q", gpus_per_node=1, cpu_milli=c)
            for i, c in enumerate([2_000, 4_000, 9_000])
        ),
    ]

    shapes = fill.typical_shapes(requests)

    assert shapes == {
        (1, WHOLE, 1, 4_000): 3.0,
        (8, WHOLE, 1, 88_000): 3.0,
        (8, WHOLE, 1, 120_000): 1.0,
    }
    # A 96-core node with 8 free GPUs serves the 88-core shape only; a 128-core one both.
    free = [WHOLE] * 8
    assert fragmentation(free, shapes, 96_000) == pytest.approx(8_000 * 1.0 / 7.0)
    assert fragmentation(free, shapes, 128_000) == 0.0


def test_fill_is_deterministic_per_seed_and_reports_every_policy() -> None:
    nodes = _fleet()
    requests = _pods()

    first = fill.run_fill(nodes, requests, arrivals=1.3, seeds=[1, 2], policies=POLICIES)
    again = fill.run_fill(nodes, requests, arrivals=1.3, seeds=[1, 2], policies=POLICIES)
    other = fill.arrival_stream(requests, fill.target_milli(nodes, 1.3), seed=3)

    assert set(first.runs) == set(POLICIES)
    for policy in POLICIES:
        assert [r.curve for r in first.runs[policy]] == [r.curve for r in again.runs[policy]]
        assert [r.seed for r in first.runs[policy]] == [1, 2]
    stream = fill.arrival_stream(requests, fill.target_milli(nodes, 1.3), seed=1)
    assert [r.id for r in stream] != [r.id for r in other]


def test_fill_in_parallel_processes_gives_the_same_figures() -> None:
    nodes = _fleet()
    requests = _pods()

    serial = fill.run_fill(nodes, requests, arrivals=1.1, seeds=[5, 6], policies=POLICIES)
    parallel = fill.run_fill(nodes, requests, arrivals=1.1, seeds=[5, 6], policies=POLICIES, jobs=2)

    for policy in POLICIES:
        assert serial.median(policy) == parallel.median(policy)


def test_the_bundled_trace_reads_as_the_schema_says() -> None:
    nodes = trace.load_nodes(BUNDLED_NODES)
    pods = trace.load_pods(BUNDLED_PODS)

    assert len(nodes) == 1213
    assert trace.gpu_capacity_milli(nodes) == 6212 * WHOLE
    assert {n.gpu_model for n in nodes} == {"p100", "t4", "v100m16", "v100m32", "a10", "g2", "g3"}
    assert all(n.shareable for n in nodes)
    assert len(pods) == 8152
    assert sum(p.gpu_demand_milli for p in pods) == 6_086_800
    assert sum(1 for p in pods if p.request.gpus_per_node == 0) == 1088
    assert sum(1 for p in pods if p.request.fractional) == 3078
    assert BUNDLED_NODES.stat().st_size + BUNDLED_PODS.stat().st_size < 1_000_000
    assert (trace.BUNDLED / "README.md").exists()


def test_fill_on_a_slice_of_the_bundled_trace_through_the_command(tmp_path: Path) -> None:
    # A slice of the trace: its first 40 nodes and the pods that arrived first.
    nodes_text = BUNDLED_NODES.read_text().splitlines()
    pods_text = BUNDLED_PODS.read_text().splitlines()
    (tmp_path / trace.NODE_FILE).write_text("\n".join(nodes_text[:41]) + "\n")
    (tmp_path / trace.pod_file("slice")).write_text("\n".join(pods_text[:301]) + "\n")
    out = io.StringIO()

    call_command(
        "simulate",
        "--mode=fill",
        f"--trace={tmp_path}",
        "--pods=slice",
        "--arrivals=1.2",
        "--seeds=2",
        "--json",
        stdout=out,
    )

    payload = json.loads(out.getvalue().strip().splitlines()[-1])
    assert set(payload["policies"]) == set(POLICIES)
    assert payload["seeds"] == [42, 43]
    assert payload["arrivals"] == 1.2
    for figures in payload["policies"].values():
        assert 0.0 <= figures["unallocated_gpu_pct"] <= 100.0
        assert len(figures["unallocated_gpu_pct_by_seed"]) == 2
        assert "120" in figures["curve"]


def test_a_missing_pod_list_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"openb_pod_list_nope\.csv is not in"):
        call_command("simulate", "--mode=fill", "--pods=nope", "--json", stdout=io.StringIO())
    with pytest.raises(CommandError, match="unknown policies"):
        call_command("simulate", "--policies=fgd", stdout=io.StringIO())


def test_every_pod_list_in_one_command_against_the_study(tmp_path: Path) -> None:
    """Two pod lists of the study, each a slice of the trace: one row and one JSON entry each,
    with FGD's published figure beside the engine's and the verdict drawn from both."""
    nodes_text = BUNDLED_NODES.read_text().splitlines()
    pods_text = BUNDLED_PODS.read_text().splitlines()
    (tmp_path / trace.NODE_FILE).write_text("\n".join(nodes_text[:41]) + "\n")
    (tmp_path / trace.pod_file("default")).write_text("\n".join(pods_text[:301]) + "\n")
    (tmp_path / trace.pod_file("multigpu20")).write_text(
        "\n".join(pods_text[:1] + pods_text[301:601]) + "\n"
    )
    out = io.StringIO()

    call_command(
        "simulate",
        "--mode=fill",
        f"--trace={tmp_path}",
        "--pods=default,multigpu20",
        "--seeds=2",
        "--first-seed=100",
        "--jobs=2",
        stdout=out,
    )

    lines = out.getvalue().strip().splitlines()
    payload = json.loads(lines[-1])
    assert [line.split()[0] for line in lines[2:4]] == ["default", "multigpu20"]
    assert payload["seeds"] == [100, 101]
    assert list(payload["pod_lists"]) == ["default", "multigpu20"]
    for name, entry in payload["pod_lists"].items():
        assert set(entry["policies"]) == set(POLICIES)
        assert entry["fgd_atc23"] == atc23.FGD_UNALLOCATED_130[name]
        engine = entry["policies"]["default"]["unallocated_gpu_pct"]
        assert entry["engine_beats_fgd"] == (engine < entry["fgd_atc23"])
        assert len(entry["policies"]["random"]["unallocated_gpu_pct_by_seed"]) == 2
    assert payload["engine_beats_fgd_on_every_list"] == all(
        entry["engine_beats_fgd"] for entry in payload["pod_lists"].values()
    )


def test_all_means_the_lists_with_a_published_figure() -> None:
    """``--pods all`` asks for every study list; only ``default`` is bundled, so without
    ``--trace`` the first missing one is named."""
    assert len(atc23.STUDY_POD_LISTS) == 17
    assert atc23.STUDY_POD_LISTS[0] == "default"
    with pytest.raises(CommandError, match=r"openb_pod_list_multigpu20\.csv is not in the bundled"):
        call_command("simulate", "--mode=fill", "--pods=all", "--json", stdout=io.StringIO())
    with pytest.raises(CommandError, match="one pod list"):
        call_command("simulate", "--pods=default,cpu050", "--plot=/tmp/x", stdout=io.StringIO())


# --- time mode ---------------------------------------------------------------------------------


def _small_workload() -> workload.Workload:
    return workload.synthetic(
        workload.SyntheticSpec(jobs=60, arrival_rate_per_h=40.0, nodes=2, gpus_per_node=8, seed=5)
    )


@pytest.mark.parametrize("policy", POLICIES)
def test_time_mode_counts_completions_with_sane_figures(policy: str) -> None:
    jobs = _small_workload()

    run = timed.run_time(jobs, policy, seed=5)

    assert run.completed + run.never_started == len(jobs.jobs) == 60
    assert run.completed == 60
    assert len(run.delays_s) == 60
    assert all(delay >= 0 for delay in run.delays_s)
    assert min(run.jcts_s) >= min(job.runtime_s for job in jobs.jobs) - 1e-6
    assert sum(run.jcts_s) >= sum(job.runtime_s for job in jobs.jobs) - 1e-6
    assert 0.0 < run.fairness <= 1.0
    assert 0.0 <= run.allocated_pct <= 100.0
    assert all(0.0 <= s.allocated_pct <= 100.0 for s in run.samples)
    assert run.preemptions >= 0
    if policy != "default":
        assert run.preemptions == 0


def test_time_mode_is_deterministic() -> None:
    jobs = _small_workload()

    assert timed.run_time(jobs, "default").summary() | {"seconds": 0} == timed.run_time(
        jobs, "default"
    ).summary() | {"seconds": 0}


def test_time_mode_through_the_command_prints_json_last() -> None:
    out = io.StringIO()

    call_command(
        "simulate",
        "--mode=time",
        "--num-jobs=40",
        "--cluster-nodes=2",
        "--tenants=a=2,b=1",
        "--shapes=1x500=1,2x1000=1",
        "--priorities=0=1:preemptible,10=1",
        "--json",
        stdout=out,
    )

    payload = json.loads(out.getvalue().strip().splitlines()[-1])
    assert payload["mode"] == "time"
    assert set(payload["policies"]) == set(POLICIES)
    default = payload["policies"]["default"]
    assert default["completed"] == 40
    assert 0 < default["fairness_jain"] <= 1
    assert set(default["queueing_delay_s"]) == {"p50", "p95", "p99", "mean"}
    assert default["queueing_delay_s"]["p50"] <= default["queueing_delay_s"]["p99"]


def test_time_mode_from_the_trace_timestamps() -> None:
    nodes = trace.load_nodes(BUNDLED_NODES, limit=20)
    pods = trace.load_pods(BUNDLED_PODS)

    jobs = workload.from_trace(nodes, pods, max_jobs=50, speedup=100.0)
    run = timed.run_time(jobs, "first-fit")

    assert len(jobs.jobs) == 50
    assert set(jobs.tenants) <= set(workload.QOS_TENANTS)
    assert run.completed + run.never_started == 50
    assert all(delay >= 0 for delay in run.delays_s)


def test_percentiles_interpolate() -> None:
    assert timed.percentile([], 50) == 0.0
    assert timed.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert timed.percentile([1.0, 2.0], 100) == 2.0


def test_the_simulator_runs_without_django_in_the_process() -> None:
    code = (
        "import sys; sys.modules['django'] = None\n"
        "from scheduler.simulator import fill, report, timed, trace, workload\n"
        "w = workload.synthetic(workload.SyntheticSpec(jobs=5, nodes=1))\n"
        "print(timed.run_time(w, 'default').completed)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "5"
