"""``manage.py simulate``: the scheduling engine against baselines on a trace or a synthetic
workload (see ``scheduler/simulator``). With ``--json`` the last line is one JSON object
``{"policies": {NAME: {...}}, ...}``; the engine's own policy is ``default``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.engine.arrivals import Outlook
from scheduler.engine.forecast import Horizon
from scheduler.simulator import atc23, estimates, fill, report, timed, trace, workload
from scheduler.simulator.placers import POLICIES

# The forecast's steps in the simulation (see ``Horizon``): finer than the default, measured
# in docs/benchmarks/estimates-accuracy.md.
ESTIMATE_HORIZON = Horizon(step_share=0.01)


class Command(BaseCommand):
    help = (
        "Simulate the scheduling engine and the baselines (random, first-fit, best-fit): "
        "--mode fill (the ATC'23 fragmentation protocol on the Alibaba GPU trace) or "
        "--mode time (arrivals and runtimes)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--mode", choices=("fill", "time"), default="fill")
        parser.add_argument(
            "--trace",
            type=Path,
            help="directory of the Alibaba GPU trace v2023 (default: the bundled copy)",
        )
        parser.add_argument(
            "--pods",
            default="default",
            help="pod list NAME (openb_pod_list_NAME.csv), NAME,NAME,... or 'all': every list"
            " with a published ATC'23 figure, one table row each (fill mode)",
        )
        parser.add_argument(
            "--nodes-file", default=trace.NODE_FILE, help="node list file in the trace directory"
        )
        parser.add_argument(
            "--policies",
            default=",".join(POLICIES),
            help=f"comma-separated, of {', '.join(POLICIES)}",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object last")
        parser.add_argument("--plot", type=Path, metavar="DIR", help="write PNG plots here")
        fill_group = parser.add_argument_group("fill mode")
        fill_group.add_argument(
            "--arrivals", type=float, default=1.3, help="stop at this share of GPU capacity"
        )
        fill_group.add_argument("--seeds", type=int, default=10, help="seeds 42, 43, ...")
        fill_group.add_argument("--first-seed", type=int, default=42)
        fill_group.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
        fill_group.add_argument(
            "--curve-step", type=int, default=5, help="arrival percent between curve points"
        )
        time_group = parser.add_argument_group("time mode")
        time_group.add_argument(
            "--source",
            choices=("synthetic", "trace"),
            default="synthetic",
            help="synthetic jobs, or the pod list's creation and deletion times",
        )
        time_group.add_argument("--seed", type=int, default=42)
        time_group.add_argument("--num-jobs", type=int, default=400)
        time_group.add_argument("--rate", type=float, default=25.0, help="arrivals per hour")
        time_group.add_argument("--runtime", type=float, default=1.0, help="mean runtime, hours")
        time_group.add_argument("--cluster-nodes", type=int, default=8)
        time_group.add_argument("--gpus-per-node", type=int, default=8)
        time_group.add_argument(
            "--shapes",
            help="shape mix GPUSxMILLI=WEIGHT,... e.g. 1x500=0.3,1x1000=0.5,8x1000=0.2",
        )
        time_group.add_argument(
            "--tenants", help="tenant weights NAME=WEIGHT,... e.g. acme=2,globex=1"
        )
        time_group.add_argument(
            "--priorities",
            help="PRIORITY=WEIGHT[:preemptible],... e.g. 0=0.7:preemptible,10=0.3",
        )
        time_group.add_argument(
            "--node-limit", type=int, help="trace source: the first N GPU nodes only"
        )
        time_group.add_argument(
            "--speedup", type=float, default=1.0, help="trace source: divide inter-arrival times"
        )
        time_group.add_argument(
            "--skip-jobs", type=int, default=0, help="trace source: start after the first N pods"
        )
        time_group.add_argument(
            "--half-life", type=float, default=3600.0, help="fair-share usage half-life, s"
        )
        time_group.add_argument(
            "--estimates",
            action="store_true",
            help="measure start-time estimates (the engine's run) beside two baselines, with"
            " noisy runtime estimates (see workload.Noise)",
        )
        time_group.add_argument(
            "--noise-seed", type=int, help="seed of the runtime noise (default: --seed)"
        )
        time_group.add_argument(
            "--estimate-every", type=float, default=300.0, help="re-estimate waiting work, s"
        )
        time_group.add_argument(
            "--no-arrivals",
            action="store_true",
            help="the engine's estimates expect no arrivals (see engine.arrivals)",
        )
        time_group.add_argument(
            "--arrivals-window",
            type=float,
            default=Outlook().window_s,
            help="expected arrivals: the past replayed, s",
        )
        time_group.add_argument(
            "--arrivals-max",
            type=int,
            default=Outlook().max_arrivals,
            help="expected arrivals: at most this many per forecast",
        )

        time_group.add_argument(
            "--knows",
            choices=("arrivals", "runtimes", "both"),
            help="a bound, not an estimator: the engine's estimates are told the real future"
            " submissions, every job's real runtime, or both",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        policies = [p.strip() for p in options["policies"].split(",") if p.strip()]
        unknown = sorted(set(policies) - set(POLICIES))
        if unknown or not policies:
            raise CommandError(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
        if options["plot"] and options["mode"] == "fill" and len(_pod_lists(options["pods"])) > 1:
            raise CommandError("--plot draws one pod list: name one with --pods")
        try:
            if options["plot"]:
                report.check_plotting()
            if options["mode"] == "fill":
                self._fill(policies, options)
            else:
                self._time(policies, options)
        except (trace.TraceError, ValueError) as error:
            raise CommandError(str(error)) from None
        except report.PlottingUnavailable as error:
            raise CommandError(str(error)) from None

    def _fill(self, policies: list[str], options: dict[str, Any]) -> None:
        if options["arrivals"] <= 0 or options["seeds"] < 1:
            raise CommandError("--arrivals must be > 0 and --seeds >= 1")
        names = _pod_lists(options["pods"])
        nodes = trace.load_nodes(trace.resolve(options["trace"], options["nodes_file"]))
        pod_lists = {
            name: [
                pod.request
                for pod in trace.load_pods(trace.resolve(options["trace"], trace.pod_file(name)))
            ]
            for name in names
        }
        seeds = list(range(options["first_seed"], options["first_seed"] + options["seeds"]))

        def progress(name: str, run: fill.FillRun) -> None:
            if not options["json"] or options["verbosity"] > 1:
                where = f"{name} " if len(names) > 1 else ""
                sys.stderr.write(
                    f"{where}{run.policy} seed {run.seed}: {run.unallocated_gpu_pct:.2f}%"
                    f" unallocated, {run.skipped} pods skipped, {run.seconds:.1f}s\n"
                )

        results = fill.run_fill_lists(
            nodes,
            pod_lists,
            arrivals=options["arrivals"],
            seeds=seeds,
            policies=policies,
            jobs=max(1, options["jobs"]),
            on_run=progress,
        )
        if len(names) > 1:
            if not options["json"]:
                self.stdout.write("\n".join(report.lists_lines(results)))
            self.stdout.write(json.dumps(report.lists_json(results), sort_keys=True))
            return
        (result,) = results.values()
        payload = report.fill_json(result, max(1, options["curve_step"]))
        payload["pods"] = names[0]
        if options["plot"]:
            for path in report.plot_fill(result, options["plot"]):
                sys.stderr.write(f"wrote {path}\n")
        if not options["json"]:
            self.stdout.write("\n".join(report.fill_lines(result)))
        self.stdout.write(json.dumps(payload, sort_keys=True))

    def _time(self, policies: list[str], options: dict[str, Any]) -> None:
        if options["source"] == "trace":
            nodes = trace.load_nodes(
                trace.resolve(options["trace"], options["nodes_file"]), limit=options["node_limit"]
            )
            pods = trace.load_pods(trace.resolve(options["trace"], trace.pod_file(options["pods"])))
            jobs = workload.from_trace(
                nodes,
                pods,
                max_jobs=options["num_jobs"],
                speedup=options["speedup"],
                skip_jobs=options["skip_jobs"],
            )
            meta: dict[str, object] = {"source": "trace", "pods": options["pods"]}
        else:
            spec = workload.SyntheticSpec(
                jobs=options["num_jobs"],
                arrival_rate_per_h=options["rate"],
                mean_runtime_h=options["runtime"],
                nodes=options["cluster_nodes"],
                gpus_per_node=options["gpus_per_node"],
                seed=options["seed"],
                **_mixes(options),
            )
            jobs = workload.synthetic(spec)
            meta = {"source": "synthetic", "seed": options["seed"]}
        meta["jobs"] = len(jobs.jobs)
        meta["capacity_gpus"] = sum(node.gpu_count for node in jobs.nodes)
        observer = None
        if options["estimates"]:
            if "default" not in policies:
                raise CommandError("--estimates measures the engine's run: include default")
            if options["estimate_every"] <= 0:
                raise CommandError("--estimate-every must be > 0")
            seed = options["seed"] if options["noise_seed"] is None else options["noise_seed"]
            noise = workload.Noise(seed=seed)
            jobs = workload.with_noise(jobs, noise)
            meta["noise"] = {**asdict(noise), "round_estimates_s": workload.ROUND_ESTIMATES_S}
            outlook = Outlook(
                window_s=options["arrivals_window"], max_arrivals=options["arrivals_max"]
            )
            observer = estimates.Estimates(
                jobs,
                every_s=options["estimate_every"],
                horizon=ESTIMATE_HORIZON,
                outlook=None if options["no_arrivals"] else outlook,
                knows_arrivals=options["knows"] in ("arrivals", "both"),
                knows_runtimes=options["knows"] in ("runtimes", "both"),
            )
        runs = {
            policy: timed.run_time(
                jobs,
                policy,
                seed=options["seed"],
                half_life_s=options["half_life"],
                observer=observer if policy == "default" else None,
            )
            for policy in policies
        }
        if options["plot"]:
            for path in report.plot_time(runs, options["plot"]):
                sys.stderr.write(f"wrote {path}\n")
        payload = report.time_json(runs, meta)
        if observer is not None:
            payload |= observer.as_json()
        if not options["json"]:
            self.stdout.write("\n".join(report.time_lines(runs)))
            if observer is not None:
                self.stdout.write("\n".join(report.estimate_lines(observer)))
        self.stdout.write(json.dumps(payload, sort_keys=True))


def _pod_lists(text: str) -> list[str]:
    """``all``: the study's pod lists; else the comma-separated names, each once."""
    if text.strip() == "all":
        return list(atc23.STUDY_POD_LISTS)
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise CommandError("--pods: name a pod list, several NAME,NAME, or all")
    return names


def _mixes(options: dict[str, Any]) -> dict[str, Any]:
    """The synthetic generator's mixes given on the command line."""
    mixes: dict[str, Any] = {}
    if options["shapes"]:
        shapes = {}
        for key, weight in _pairs(options["shapes"], "--shapes"):
            gpus, _, milli = key.partition("x")
            shapes[(int(gpus), int(milli or 1000))] = float(weight)
        mixes["shapes"] = shapes
    if options["tenants"]:
        mixes["tenants"] = {k: float(v) for k, v in _pairs(options["tenants"], "--tenants")}
    if options["priorities"]:
        priorities = {}
        for key, value in _pairs(options["priorities"], "--priorities"):
            weight, _, flag = value.partition(":")
            priorities[int(key)] = (float(weight), flag == "preemptible")
        mixes["priorities"] = priorities
    return mixes


def _pairs(text: str, option: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise CommandError(f"{option}: {item!r} is not NAME=VALUE")
        pairs.append((key.strip(), value.strip()))
    return pairs
