"""Results as one JSON-ready object, a few readable lines, and optional PNG plots."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler.simulator.atc23 import FGD_UNALLOCATED_130
from scheduler.simulator.estimates import Estimates
from scheduler.simulator.fill import FillResult
from scheduler.simulator.timed import TimeRun

# Unallocated GPU % at 130% arrivals on openb_pod_list_default, median of 10 seeds: the ATC'23
# study's Fig. 9(a) (Weng et al., "Beware of Fragmentation").
PAPER_130 = {"random": 12.6, "dot-product": 9.2, "gpu-packing": 7.9, "best-fit": 6.9, "fgd": 4.6}


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed."""


def fill_json(result: FillResult, curve_step: int) -> dict[str, object]:
    policies: dict[str, object] = {}
    for policy, runs in result.runs.items():
        curve = result.median_curve(policy)
        final = max(curve)
        shown = {str(k): round(v, 3) for k, v in curve.items() if k % curve_step == 0 or k == final}
        policies[policy] = {
            "unallocated_gpu_pct": round(result.median(policy), 3),
            "unallocated_gpu_pct_by_seed": [round(r.unallocated_gpu_pct, 3) for r in runs],
            "curve": shown,
            "placed_pods_median": sorted(r.placed for r in runs)[len(runs) // 2],
            "skipped_pods_median": sorted(r.skipped for r in runs)[len(runs) // 2],
            "seconds_per_seed": round(sum(r.seconds for r in runs) / len(runs), 2),
        }
    return {
        "mode": "fill",
        "arrivals": result.arrivals,
        "capacity_gpus": result.capacity_gpus,
        "seeds": list(result.seeds),
        "reference_atc23_130pct": PAPER_130,
        "policies": policies,
    }


def fill_lines(result: FillResult) -> list[str]:
    lines = [f"unallocated GPU % at {result.arrivals:.0%} arrivals (median of {len(result.seeds)})"]
    for policy in result.runs:
        paper = PAPER_130.get(policy)
        beside = f"   (ATC'23: {paper}%)" if paper is not None and result.arrivals == 1.3 else ""
        lines.append(f"  {policy:<10} {result.median(policy):6.2f}%{beside}")
    if result.arrivals == 1.3:
        lines.append(f"  {'fgd':<10}    --    (ATC'23: {PAPER_130['fgd']}%)")
    return lines


def lists_json(results: Mapping[str, FillResult]) -> dict[str, object]:
    """Several pod lists: per list, each policy's median and per-seed figures, the study's FGD
    figure (at 130 % only) and whether the engine (``default``) left fewer GPUs unallocated."""
    pod_lists: dict[str, object] = {}
    verdicts: list[bool] = []
    for name, result in results.items():
        fgd = FGD_UNALLOCATED_130.get(name) if result.arrivals == 1.3 else None
        entry: dict[str, object] = {
            "policies": {
                policy: {
                    "unallocated_gpu_pct": round(result.median(policy), 3),
                    "unallocated_gpu_pct_by_seed": [round(r.unallocated_gpu_pct, 3) for r in runs],
                    "seconds_per_seed": round(sum(r.seconds for r in runs) / len(runs), 2),
                }
                for policy, runs in result.runs.items()
            },
            "fgd_atc23": fgd,
        }
        if fgd is not None and "default" in result.runs:
            verdicts.append(round(result.median("default"), 3) < fgd)
            entry["engine_beats_fgd"] = verdicts[-1]
        pod_lists[name] = entry
    first = next(iter(results.values()))
    return {
        "mode": "fill",
        "arrivals": first.arrivals,
        "capacity_gpus": first.capacity_gpus,
        "seeds": list(first.seeds),
        "pod_lists": pod_lists,
        "engine_beats_fgd_on_every_list": bool(verdicts) and all(verdicts),
    }


def lists_lines(results: Mapping[str, FillResult]) -> list[str]:
    """One row per pod list: each policy's median unallocated GPU %, then FGD's figure."""
    first = next(iter(results.values()))
    policies = list(first.runs)
    lines = [
        f"unallocated GPU % at {first.arrivals:.0%} arrivals (median of {len(first.seeds)} seeds"
        f" {first.seeds[0]}-{first.seeds[-1]})",
        f"  {'pod list':<12}" + "".join(f" {p:>10}" for p in policies) + f" {'FGD ATC23':>10}",
    ]
    for name, result in results.items():
        fgd = FGD_UNALLOCATED_130.get(name) if result.arrivals == 1.3 else None
        row = "".join(f" {result.median(p):>10.2f}" for p in policies)
        lines.append(f"  {name:<12}{row} {'--' if fgd is None else f'{fgd:.2f}':>10}")
    return lines


def time_json(runs: Mapping[str, TimeRun], meta: Mapping[str, object]) -> dict[str, object]:
    return {"mode": "time", **meta, "policies": {p: r.summary() for p, r in runs.items()}}


def time_lines(runs: Mapping[str, TimeRun]) -> list[str]:
    lines = [
        f"{'policy':<10} {'delay p50':>10} {'p95':>9} {'p99':>9} {'JCT p50':>9} {'alloc%':>7}"
        f" {'frag%':>6} {'Jain':>6} {'preempt':>7} {'done':>5}"
    ]
    for policy, run in runs.items():
        s = run.summary()
        delay = s["queueing_delay_s"]
        jct = s["jct_s"]
        assert isinstance(delay, dict)  # noqa: S101 -- narrowing for the type checker
        assert isinstance(jct, dict)  # noqa: S101
        lines.append(
            f"{policy:<10} {delay['p50']:>10.0f} {delay['p95']:>9.0f} {delay['p99']:>9.0f}"
            f" {jct['p50']:>9.0f} {run.allocated_pct:>7.1f} {run.fragmented_pct:>6.1f}"
            f" {run.fairness:>6.3f} {run.preemptions:>7} {run.completed:>5}"
        )
    return lines


def estimate_lines(observed: Estimates) -> list[str]:
    """The start-time estimates' table: each estimator at submission and re-estimated."""
    lines = [
        f"{'estimates':<14} {'when':<14} {'count':>6} {'within':>7} {'<=60s':>6} {'median':>8}"
    ]
    for when, at_submission in (("at submission", True), ("re-estimated", False)):
        for name, figures in observed.figures(at_submission=at_submission).items():
            median = figures.median_abs_error_s
            lines.append(
                f"{name:<14} {when:<14} {figures.count:>6} {100 * figures.within_share:>6.1f}%"
                f" {100 * figures.within_60s_share:>5.1f}% {median:>7.0f}s"
            )
    return lines


def check_plotting() -> None:
    """Raises ``PlottingUnavailable`` now rather than after a long run."""
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlottingUnavailable(
            "--plot needs matplotlib: pip install 'matplotlib>=3.8,<4'"
        ) from None
    return plt


def plot_fill(result: FillResult, directory: Path) -> list[Path]:
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for policy in result.runs:
        curve = result.median_curve(policy)
        axes.plot(list(curve), [100.0 - v for v in curve.values()], label=policy)
    axes.plot([0, 100], [0, 100], linestyle=":", color="grey", label="ideal")
    axes.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
    axes.set_ylabel("GPU allocation ratio (%)")
    axes.set_title(f"fill: median of {len(result.seeds)} seeds")
    axes.grid(alpha=0.4)
    axes.legend()
    first = directory / "fill_allocation.png"
    figure.savefig(first, dpi=120, bbox_inches="tight")
    plt.close(figure)
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for policy in result.runs:
        curve = {k: v for k, v in result.median_curve(policy).items() if k >= 80}
        axes.plot(list(curve), list(curve.values()), label=policy)
    if result.arrivals >= 1.3:
        axes.axhline(PAPER_130["fgd"], linestyle="--", color="grey", label="FGD at 130% (ATC'23)")
    axes.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
    axes.set_ylabel("unallocated GPU (%)")
    axes.grid(alpha=0.4)
    axes.legend()
    second = directory / "fill_unallocated.png"
    figure.savefig(second, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return [first, second]


def plot_time(runs: Mapping[str, TimeRun], directory: Path) -> list[Path]:
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for policy, run in runs.items():
        axes.step(
            [s.at_s / 3600 for s in run.samples],
            [s.allocated_pct for s in run.samples],
            where="post",
            label=policy,
        )
    axes.set_xlabel("time (h)")
    axes.set_ylabel("GPU allocation ratio (%)")
    axes.grid(alpha=0.4)
    axes.legend()
    first = directory / "time_allocation.png"
    figure.savefig(first, dpi=120, bbox_inches="tight")
    plt.close(figure)
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for policy, run in runs.items():
        axes.plot(
            [start / 3600 for start, _ in run.starts],
            [delay / 60 for _, delay in run.starts],
            marker=".",
            linestyle="",
            label=policy,
            alpha=0.6,
        )
    axes.set_xlabel("start time (h)")
    axes.set_ylabel("queueing delay (min)")
    axes.grid(alpha=0.4)
    axes.legend()
    second = directory / "time_delay.png"
    figure.savefig(second, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return [first, second]
