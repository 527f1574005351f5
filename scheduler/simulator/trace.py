"""The Alibaba GPU cluster trace v2023 ("openb") as engine inputs.

Nodes from ``openb_node_list_*.csv``, pods from ``openb_pod_list_*.csv`` (see ``data/README.md``
for the source and terms). Units are the engine's: milli-cores, MiB, milli-GPU.

GPU models are the trace's codes lower-cased (``V100M16`` -> ``v100m16``), as the fleet import
of ``inventory`` names them, so a pod's ``gpu_spec`` and a node's model meet. Every GPU of the
trace is shareable (pods ask for milli-GPUs). V100 nodes get one NVLink domain per node, the
others (PCIe, or unknown for ``G2``/``G3``) a domain per GPU, as the fleet import does.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from scheduler.engine.model import WHOLE, Node, Request

BUNDLED = Path(__file__).resolve().parent / "data"
NODE_FILE = "openb_node_list_gpu_node.csv"
NVLINK_MODELS = frozenset({"v100m16", "v100m32"})
RACK_SIZE = 16  # the trace has no racks: each model's nodes fill racks of 16, in file order


class TraceError(ValueError):
    """A trace file is missing or does not read as the trace's format."""


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of a pod list: the request, and its times when the file has them."""

    request: Request
    created_at: float | None = None
    deleted_at: float | None = None
    scheduled_at: float | None = None
    qos: str = ""

    @property
    def gpu_demand_milli(self) -> int:
        return self.request.gpu_demand_milli


def pod_file(name: str) -> str:
    """``default`` -> ``openb_pod_list_default.csv``."""
    return f"openb_pod_list_{name}.csv"


def resolve(trace_dir: Path | None, file_name: str) -> Path:
    """The file in ``trace_dir`` when given, else the bundled copy."""
    directory = trace_dir if trace_dir is not None else BUNDLED
    path = directory / file_name
    if not path.is_file():
        where = f"--trace {trace_dir}" if trace_dir is not None else "the bundled data"
        raise TraceError(f"{file_name} is not in {where}")
    return path


def model_slug(code: str) -> str:
    return code.strip().lower()


def load_nodes(path: Path, limit: int | None = None) -> tuple[Node, ...]:
    """The GPU nodes of a node list (CPU-only rows are skipped: the FGD study uses GPU nodes)."""
    nodes: list[Node] = []
    per_model: dict[str, int] = {}
    for row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        gpus = int(row["gpu"])
        if gpus == 0:
            continue
        model = model_slug(row["model"])
        index = per_model.get(model, 0)
        per_model[model] = index + 1
        nodes.append(
            Node(
                name=row["sn"],
                gpu_model=model,
                gpu_domains=(0,) * gpus if model in NVLINK_MODELS else tuple(range(gpus)),
                cpu_milli=int(row["cpu_milli"]),
                memory_mib=int(row["memory_mib"]),
                rack=f"rack-{model}-{index // RACK_SIZE + 1:02d}",
                shareable=True,
            )
        )
        if limit is not None and len(nodes) >= limit:
            break
    return tuple(nodes)


def load_pods(path: Path, queue: str = "trace") -> tuple[TracePod, ...]:
    """Every pod of a pod list, as single-node requests (CPU-only pods ask for 0 GPUs)."""
    pods = []
    for row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        gpus = int(row["num_gpu"])
        milli = int(row["gpu_milli"]) if gpus else WHOLE
        spec = row.get("gpu_spec") or ""
        models = tuple(dict.fromkeys(model_slug(m) for m in spec.split("|") if m.strip()))
        created = _seconds(row.get("creation_time"))
        request = Request(
            id=row["name"],
            queue=queue,
            gpus_per_node=gpus,
            nodes=1,
            gpu_milli=milli,
            cpu_milli=int(row["cpu_milli"]),
            memory_mib=int(row["memory_mib"]),
            gpu_models=models,
            submitted_at=created or 0.0,
        )
        pods.append(
            TracePod(
                request=request,
                created_at=created,
                deleted_at=_seconds(row.get("deletion_time")),
                scheduled_at=_seconds(row.get("scheduled_time")),
                qos=(row.get("qos") or "").strip(),
            )
        )
    if not pods:
        raise TraceError(f"{path.name} has no pods")
    return tuple(pods)


def gpu_capacity_milli(nodes: Iterable[Node]) -> int:
    return sum(node.gpu_count for node in nodes) * WHOLE


def _seconds(raw: str | None) -> float | None:
    raw = (raw or "").strip()
    return float(raw) if raw else None


def _rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path.name}: missing columns {', '.join(missing)}")
        rows = list(reader)
    for line, row in enumerate(rows, start=2):
        for column in required:
            value = row.get(column) or ""
            if column not in {"sn", "name", "model"} and not value.strip().isdigit():
                raise TraceError(f"{path.name} line {line}: {column} is {value!r}, not a number")
    return rows
