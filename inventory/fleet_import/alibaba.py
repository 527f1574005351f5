"""The node list of the Alibaba GPU trace v2023 (``openb_node_list_*.csv``) as a fleet: each
row is checked by a pydantic model, problems named ``line N.<column>``."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from inventory.fleet_import.fields import HOST_NAME, MAX_GPUS_PER_NODE, MAX_NAME
from inventory.fleet_import.problems import Problems, problem
from inventory.fleet_import.spec import (
    ClusterSpec,
    FleetSpec,
    GpuModelSpec,
    NodeSpec,
    RackSpec,
    RegionSpec,
)

ALIBABA_REGION = ("alibaba", "Alibaba GPU trace v2023")
ALIBABA_CLUSTER = ("openb", "Alibaba openb trace")
ALIBABA_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
# Racks are not in the trace: each model's nodes, in file order, fill racks of this many.
ALIBABA_RACK_SIZE = 16
CPU_ONLY_RACKS = "cpu"
# The trace's model codes, lowercased: the slugs match the pods' ``gpu_spec`` column. G2 and
# G3 are models Alibaba did not name: vendor and interconnect unknown, so we assume PCIe (no
# NVLink a gang could count on) and 16 GiB, the smallest and commonest memory of the named
# models, so that they neither win nor lose a placement on memory they may not have (the
# trace's pods ask for milli-GPUs, never for GPU memory). Every model is shareable: the trace
# shares GPUs in milli-GPU.
ALIBABA_GPU_MODELS = {
    "P100": GpuModelSpec("p100", "NVIDIA Tesla P100 16GB", "NVIDIA", 16, "pcie", True),
    "T4": GpuModelSpec("t4", "NVIDIA T4 16GB", "NVIDIA", 16, "pcie", True),
    "V100M16": GpuModelSpec("v100m16", "NVIDIA V100 16GB", "NVIDIA", 16, "nvlink", True),
    "V100M32": GpuModelSpec("v100m32", "NVIDIA V100 32GB", "NVIDIA", 32, "nvlink", True),
    "A10": GpuModelSpec("a10", "NVIDIA A10 24GB", "NVIDIA", 24, "pcie", True),
    "G2": GpuModelSpec("g2", "Alibaba G2 (unnamed model)", "unknown", 16, "pcie", True),
    "G3": GpuModelSpec("g3", "Alibaba G3 (unnamed model)", "unknown", 16, "pcie", True),
}


def _cell(value: object) -> str:
    return str(value or "").strip()


def _node_name(name: str) -> str:
    if not HOST_NAME.match(name) or len(name) > MAX_NAME:
        raise problem(f"{name!r} is not a node name")
    return name


def _at_least(minimum: int) -> Callable[[object], int]:
    """A cell of digits only, at least ``minimum``."""

    def read(value: object) -> int:
        raw = _cell(value)
        if not raw.isdigit() or int(raw) < minimum:
            raise problem(f"expected a whole number >= {minimum}, got {raw!r}")
        return int(raw)

    return read


class AlibabaRow(BaseModel):
    """One row of the node list, in the order its problems are reported (other columns are
    ignored). ``model`` becomes the GPU model's slug, None on a node without GPUs."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    sn: Annotated[str, BeforeValidator(_cell), AfterValidator(_node_name)]
    gpu: Annotated[int, BeforeValidator(_at_least(0)), Field(le=MAX_GPUS_PER_NODE)]
    model: str | None
    cpu_milli: Annotated[int, BeforeValidator(_at_least(1))]
    memory_mib: Annotated[int, BeforeValidator(_at_least(1))]

    @field_validator("model", mode="before")
    @classmethod
    def _known_model(cls, value: object, info: ValidationInfo) -> str | None:
        code, gpus = _cell(value), info.data.get("gpu")
        if gpus is None:  # a wrong count, reported at its column
            return None
        model = ALIBABA_GPU_MODELS.get(code)
        if gpus and model is None:
            raise problem(
                f"unknown model {code!r} (one of {', '.join(ALIBABA_GPU_MODELS)})"
                if code
                else "required for a node with GPUs"
            )
        if not gpus and code:
            raise problem(f"{code!r} given for a node without GPUs")
        return model.slug if model and gpus else None

    def spec(self, source: str) -> NodeSpec:
        return NodeSpec(
            name=self.sn,
            gpu_model=self.model,
            gpus=self.gpu,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            source=source,
        )


def alibaba_nodes_parse(text: str, *, rack_size: int = ALIBABA_RACK_SIZE) -> FleetSpec:
    """The fleet of an ``openb_node_list_*.csv`` of the Alibaba GPU trace v2023.

    Region ``alibaba``, cluster ``openb``; the GPU models of ``ALIBABA_GPU_MODELS``, the ones
    the file uses. Racks: the nodes of each model, in file order, in racks of ``rack_size``
    (``rack-<model>-NN``). NVLink models get one domain per node, PCIe ones a domain per GPU.
    Rows without GPUs (``openb_node_list_all_node.csv`` has 310) become CPU-only nodes, in
    racks ``rack-cpu-NN``. Import one of the two node files, not both: they number ``sn``
    independently, so the same name means different machines.
    """
    problems = Problems()
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in ALIBABA_COLUMNS if column not in (reader.fieldnames or [])]
    if missing:
        problems.add(
            "line 1",
            f"missing columns {', '.join(missing)} (the header is {','.join(ALIBABA_COLUMNS)})",
        )
        problems.raise_if_any()
    groups: dict[str, list[NodeSpec]] = {}
    seen: dict[str, str] = {}
    for row in reader:
        where, name = f"line {reader.line_num}", _cell(row.get("sn"))
        node = _node(row, where, problems)
        if not name:
            continue
        if name in seen:  # even in a wrong row: that is a problem of its own
            problems.add(f"{where}.sn", f"duplicate node {name!r} (also at {seen[name]})")
            continue
        seen[name] = where
        if node is not None:
            groups.setdefault(node.gpu_model or CPU_ONLY_RACKS, []).append(node)
    if not seen and not problems.items:
        problems.add("line 2", "no nodes in the file")
    problems.raise_if_any()
    racks = tuple(
        RackSpec(
            name=f"rack-{group}-{number:02d}",
            leaf_switch="",
            spine="",
            nodes=tuple(nodes[start : start + rack_size]),
        )
        for group, nodes in groups.items()
        for number, start in enumerate(range(0, len(nodes), rack_size), start=1)
    )
    used = {node.gpu_model for nodes in groups.values() for node in nodes}
    return FleetSpec(
        gpu_models=tuple(m for m in ALIBABA_GPU_MODELS.values() if m.slug in used),
        regions=(
            RegionSpec(
                slug=ALIBABA_REGION[0],
                name=ALIBABA_REGION[1],
                clusters=(
                    ClusterSpec(slug=ALIBABA_CLUSTER[0], name=ALIBABA_CLUSTER[1], racks=racks),
                ),
            ),
        ),
    )


def _node(row: Mapping[str | None, object], where: str, problems: Problems) -> NodeSpec | None:
    """The row's node, or None (its problems recorded) when the row is wrong."""
    try:
        return AlibabaRow.model_validate(row).spec(where)
    except ValidationError as exc:
        problems.add_errors(exc, prefix=where)
        return None
