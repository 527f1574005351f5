"""The compiled engine (``scheduler.engine.native``): used only while built from the sources
here, and deciding exactly as the plain Python one."""

from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import scheduler.engine
from scheduler.engine import native
from scheduler.engine.forecast import Basis, Runtime, StartEstimate
from scheduler.engine.model import (
    Allocation,
    Node,
    Placement,
    Policy,
    QueueConfig,
    Request,
    Snapshot,
)

ROOT = Path(__file__).resolve().parents[2]


def _sources(tmp_path: Path) -> Path:
    sources = tmp_path / "engine"
    shutil.copytree(native.SOURCES, sources, ignore=shutil.ignore_patterns("__pycache__"))
    return sources


def _stamped(tmp_path: Path, sources: Path) -> Path:
    build = tmp_path / "build"
    (build / "scheduler" / "engine").mkdir(parents=True)
    (build / native.STAMP).write_text(native.fingerprint(sources) + "\n")
    return build


def test_a_build_counts_only_while_the_compiled_sources_are_those_it_was_made_from(
    tmp_path: Path,
) -> None:
    sources = _sources(tmp_path)
    assert not native.fresh(tmp_path / "none", sources)  # never built
    build = _stamped(tmp_path, sources)
    assert native.fresh(build, sources)
    (sources / "native.py").write_text("# not compiled: no matter\n")
    assert native.fresh(build, sources)
    placement = sources / "placement.py"
    placement.write_text(placement.read_text() + "\n# one line more\n")
    assert not native.fresh(build, sources)


def test_a_fresh_build_goes_first_on_the_package_path_unless_plain_python_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = _sources(tmp_path)
    build = _stamped(tmp_path, sources)
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = [str(sources)]
    monkeypatch.setenv("NEOCLOUD_ENGINE", "python")
    assert not native.use(path, build, sources)
    assert path == [str(sources)]
    monkeypatch.delenv("NEOCLOUD_ENGINE")
    assert native.use(path, build, sources)
    assert path == [str(build / "scheduler" / "engine"), str(sources)]
    assert str(build) in sys.path  # where the shared library is found
    stale = [str(sources)]
    (sources / "cycle.py").write_text("# edited since the build\n")
    assert not native.use(stale, build, sources)
    assert stale == [str(sources)]


@pytest.mark.smoke
def test_this_process_runs_the_build_exactly_when_a_fresh_one_is_there() -> None:
    wanted = native.fresh() and os.environ.get("NEOCLOUD_ENGINE", "").lower() != "python"
    assert scheduler.engine.NATIVE is wanted
    from scheduler.engine import cycle

    assert Path(cycle.__file__).suffix == (".so" if wanted else ".py")


_DECIDE = """
import json
import scheduler.engine
from bench.scheduler import NOW, scenario
from scheduler.engine.cycle import Scheduler
from scheduler.engine.forecast import Basis, Runtime, forecast

snapshot, pending, policy = scenario(0.1, 22_000)
engine = Scheduler(snapshot, policy)
decisions = engine.cycle(pending, NOW)
waiting = [r for r in pending if r.id in decisions.pending]

def runtime_of(workload):
    return Runtime(3000.0 + len(workload) * 97 % 1800, 1200.0, 7200.0, Basis.RUNTIME_ESTIMATES)

estimates = forecast(engine.snapshot, waiting, policy, NOW + 1, runtime_of)
print(json.dumps({
    "native": scheduler.engine.NATIVE,
    "granted": [[a.workload, a.gpu_model, [[p.node, list(p.gpus)] for p in a.placements]]
                for a in decisions.allocations],
    "preempted": [[p.victim, p.for_workload, p.code] for p in decisions.preemptions],
    "waiting": {w: r.code for w, r in decisions.pending.items()},
    "estimates": {w: [e.start, e.earliest, e.latest, list(e.basis)] for w, e in estimates.items()},
}, sort_keys=True))
"""


def _decided(engine: str) -> dict[str, object]:
    environment = {**os.environ, "NEOCLOUD_ENGINE": engine}
    done = subprocess.run(
        [sys.executable, "-c", _DECIDE],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    decided: dict[str, object] = json.loads(done.stdout)
    return decided


def test_the_compiled_engine_decides_and_forecasts_exactly_as_the_plain_one() -> None:
    if not native.fresh():
        pytest.skip("no fresh build of the engine (make native)")
    plain, compiled = _decided("python"), _decided("native")
    assert plain.pop("native") is False
    assert compiled.pop("native") is True
    # A scenario with grants, preemptions and estimates, all compared.
    assert plain["granted"]
    assert plain["preempted"]
    assert plain["estimates"]
    assert compiled == plain


@pytest.mark.parametrize(
    "value",
    [
        Node("n1", "h100", (0, 0, 1, 1), 64_000, 512_000, rack="r1"),
        Request("w1", "q1", gpus_per_node=2, gpu_models=("h100",), runtime_estimate_s=60.0),
        Allocation(
            "w1", "q1", "h100", (Placement("n1", (0, 1), 1000, 8000, 64_000),), started_at=5.0
        ),
        Snapshot((Node("n1", "h100", (0,), 8000, 64_000),)),
        Policy(queues={"q1": QueueConfig("q1", nominal={"h100": 8})}),
        Runtime(60.0, 30.0, 120.0, Basis.LEARNED_RUNTIMES),
        StartEstimate("w1", 10.0, 5.0, 20.0, (Basis.RUNTIME_ESTIMATES,)),
    ],
    ids=lambda value: type(value).__name__,
)
def test_engine_values_copy_and_pickle_alike_compiled_or_not(value: object) -> None:
    # The simulator's parallel fill sends them to other processes.
    assert pickle.loads(pickle.dumps(value)) == value  # noqa: S301 -- our own bytes
    assert copy.copy(value) == value
    assert copy.deepcopy(value) == value
