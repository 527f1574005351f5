"""Importing a fleet: a YAML description, or the node list of the Alibaba GPU trace.

Two stages. ``fleet_parse`` / ``alibaba_nodes_parse`` check the untrusted file and turn it into
plain frozen dataclasses (``FleetSpec``), collecting every problem with its path in the file;
``fleet_import`` then checks the file against the fleet as it is and applies it through the
services (``gpu_model_define``, ``region_define``, ``cluster_define``, ``rack_define``,
``node_register``), all in one transaction: bad input writes nothing.

The YAML format (``examples/fleet.yaml`` is a complete example)::

    gpu_models:                       # optional; a node may also name a model defined before
      - slug: h100-sxm5-80gb          # required: letters, digits, - and _
        name: NVIDIA H100 SXM5 80GB   # required
        vendor: NVIDIA                # required
        memory_gib: 80                # required, >= 0
        interconnect: nvswitch        # required: nvswitch | nvlink | pcie
        shareable: false              # default false: can be sold in fractions (milli-GPU)
        mig_profiles: [1g.10gb, 7g.80gb]  # default []
    regions:
      - slug: eu-central              # required
        name: Frankfurt               # default: the slug
        clusters:
          - slug: fra1                # required, unique across regions
            name: Frankfurt 1         # default: the slug
            racks:
              - name: r01             # required, unique in the cluster
                leaf_switch: leaf-r01 # default: leaf-<name>
                spine: spine-a        # default: ""
                nodes:
                  - name: h100-{n:02d}  # with count: a pattern, {n} runs from start
                    count: 8            # default: one node, and name is taken literally
                    start: 1            # default 1
                    gpu_model: h100-sxm5-80gb  # required when gpus > 0
                    gpus: 8             # default 0 (a CPU-only node, no gpu_model)
                    nvlink_domains: 1   # see below
                    cpu_milli: 112000   # required: thousandths of a core
                    memory_mib: 2097152 # required
            nodes: []                 # nodes in no rack (optional)

``nvlink_domains`` says how a node's GPUs split into NVLink domains (GPUs of one domain talk
over NVLink/NVSwitch, across domains over PCIe): an integer k cuts the GPUs into k equal
groups of consecutive indexes (1: one domain, as on an 8-GPU NVSwitch board), a list gives the
group sizes (``[4, 4]``), ``per-gpu`` puts every GPU alone (PCIe cards). By default it follows
the model's interconnect: one domain for ``nvswitch`` and ``nvlink``, per GPU for ``pcie``.

Names of nodes and racks are host-like (letters, digits, ``.``, ``-``, ``_``); unknown fields
are errors, so a typo never passes silently. Errors name their place, e.g.
``regions[0].clusters[1].racks[0].nodes[2].gpu_model: unknown model 'h200'``.

Importing is idempotent: the services record only what differs, so a second run of the same
file appends no event; a node whose rack, CPU or memory changed records one
``NodeRespecified``. Nothing is ever removed: a node missing from the file stays as it is. A
node's GPUs (model, count, NVLink domains) cannot be changed by an import (no event says so):
the file is refused, naming the node.
"""

from __future__ import annotations

import csv
import io
import re
import string
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml
from django.db import transaction

from events import store
from events.models import Event
from inventory import services
from inventory.models import Cluster, Gpu, GpuModel, Interconnect, Node, Rack, Region
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor

T = TypeVar("T")

SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PER_GPU = "per-gpu"
INTERCONNECTS = tuple(choice.value for choice in Interconnect)
# Limits that catch typos (``gpus: 80`` meant for memory) long before the columns would.
MAX_GPUS_PER_NODE = 64
MAX_COUNT = 10_000
MAX_INT = 2_147_483_647  # PositiveIntegerField
MAX_BIGINT = 9_223_372_036_854_775_807
MAX_PROBLEMS_SHOWN = 20  # in the message; ``fields`` has them all


class FleetInvalid(ValidationFailed):
    """The fleet file is wrong; ``fields`` maps each place in the file to its problems."""

    code = "fleet_invalid"

    @classmethod
    def of(cls, problems: Mapping[str, list[str]]) -> FleetInvalid:
        lines = [
            f"{path}: {message}" for path, messages in problems.items() for message in messages
        ]
        shown = lines[:MAX_PROBLEMS_SHOWN]
        if len(lines) > len(shown):
            shown.append(f"... and {len(lines) - len(shown)} more")
        return cls(
            f"{len(lines)} problem{'s' if len(lines) != 1 else ''} in the fleet file,"
            " nothing imported:\n" + "\n".join(f"  {line}" for line in shown),
            fields={path: list(messages) for path, messages in problems.items()},
        )


# --- the parsed fleet ------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuModelSpec:
    slug: str
    name: str
    vendor: str
    memory_gib: int
    interconnect: str
    shareable: bool
    mig_profiles: tuple[str, ...] = ()
    source: str = field(default="", compare=False)  # where the file says it, for errors


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_model: str | None
    gpus: int
    cpu_milli: int
    memory_mib: int
    # Sizes of the NVLink domains, in GPU index order; None: by the model's interconnect.
    domain_sizes: tuple[int, ...] | None = None
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class RackSpec:
    name: str
    leaf_switch: str
    spine: str
    nodes: tuple[NodeSpec, ...]
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class ClusterSpec:
    slug: str
    name: str
    racks: tuple[RackSpec, ...]
    nodes: tuple[NodeSpec, ...] = ()  # in no rack
    source: str = field(default="", compare=False)

    def all_nodes(self) -> Iterator[tuple[RackSpec | None, NodeSpec]]:
        for rack in self.racks:
            for node in rack.nodes:
                yield rack, node
        for node in self.nodes:
            yield None, node


@dataclass(frozen=True)
class RegionSpec:
    slug: str
    name: str
    clusters: tuple[ClusterSpec, ...]
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class FleetSpec:
    gpu_models: tuple[GpuModelSpec, ...]
    regions: tuple[RegionSpec, ...]

    def clusters(self) -> Iterator[ClusterSpec]:
        for region in self.regions:
            yield from region.clusters


# --- reading untrusted input -----------------------------------------------------------------


class _Problems:
    """Every problem found, by path, in the order found."""

    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {}

    def add(self, path: str, message: str) -> None:
        messages = self.items.setdefault(path or "(file)", [])
        if message not in messages:
            messages.append(message)

    def raise_if_any(self) -> None:
        if self.items:
            raise FleetInvalid.of(self.items)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Fields:
    """One mapping of the file, read field by field. A bad or missing field is recorded as a
    problem and read as a harmless placeholder, so that one pass finds every problem."""

    def __init__(self, value: object, path: str, problems: _Problems, known: Collection[str]):
        self.path = path
        self.problems = problems
        self.data: Mapping[Any, Any] = {}
        if not isinstance(value, Mapping):
            problems.add(path, f"expected a mapping, got {_kind(value)}")
            return
        self.data = value
        for key in value:
            if key not in known:
                problems.add(
                    _join(path, str(key)), f"unknown field (known: {', '.join(sorted(known))})"
                )

    def at(self, key: str) -> str:
        return _join(self.path, key)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _get(self, key: str, required: bool) -> object:
        value = self.data.get(key)
        if value is None and required:
            self.problems.add(self.at(key), "required field missing")
        return value

    def text(
        self,
        key: str,
        *,
        default: str | None = None,
        max_length: int,
        pattern: re.Pattern[str] | None = None,
        shape: str = "",
    ) -> str:
        value = self._get(key, required=default is None)
        if value is None:
            return default or ""
        if isinstance(value, bool) or not isinstance(value, str | int):
            self.problems.add(self.at(key), f"expected text, got {_kind(value)}")
            return ""
        text = str(value).strip()
        if not text and default is None:
            self.problems.add(self.at(key), "must not be empty")
        elif len(text) > max_length:
            self.problems.add(self.at(key), f"longer than {max_length} characters")
        elif text and pattern is not None and not pattern.match(text):
            self.problems.add(self.at(key), f"{text!r} is not {shape}")
        return text

    def integer(
        self, key: str, *, default: int | None = None, minimum: int = 0, maximum: int = MAX_INT
    ) -> int:
        value = self._get(key, required=default is None)
        if value is None:
            return default or 0
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.add(self.at(key), f"expected a whole number, got {_kind(value)}")
            return default or 0
        if value < minimum:
            self.problems.add(self.at(key), f"must be at least {minimum}, got {value}")
        elif value > maximum:
            self.problems.add(self.at(key), f"must be at most {maximum}, got {value}")
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problems.add(self.at(key), f"expected true or false, got {_kind(value)}")
            return default
        return value

    def items(self, key: str) -> list[tuple[str, object]]:
        """The entries of a list field, each with its path (an absent list is empty)."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.problems.add(self.at(key), f"expected a list, got {_kind(value)}")
            return []
        return [(f"{self.at(key)}[{index}]", item) for index, item in enumerate(value)]

    def raw(self, key: str) -> object:
        return self.data.get(key)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int | float):
        return f"a number ({value})"
    return f"{type(value).__name__} {value!r}"


# --- the YAML format -------------------------------------------------------------------------

GPU_MODEL_FIELDS = (
    "slug",
    "name",
    "vendor",
    "memory_gib",
    "interconnect",
    "shareable",
    "mig_profiles",
)
NODE_FIELDS = (
    "name",
    "count",
    "start",
    "gpu_model",
    "gpus",
    "nvlink_domains",
    "cpu_milli",
    "memory_mib",
)


def fleet_parse_yaml(text: str) -> FleetSpec:
    """The fleet a YAML document describes; ``FleetInvalid`` lists every problem found."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        reason = getattr(exc, "problem", None) or str(exc)
        raise FleetInvalid.of({where: [f"not valid YAML: {reason}"]}) from exc
    return fleet_parse(data)


def fleet_parse(data: object) -> FleetSpec:
    """The fleet described by a parsed YAML document (see the module docstring)."""
    problems = _Problems()
    if data is None:
        problems.add("", "the file is empty")
        problems.raise_if_any()
    top = _Fields(data, "", problems, known=("gpu_models", "regions"))
    gpu_models = tuple(_gpu_model(item, path, problems) for path, item in top.items("gpu_models"))
    regions = tuple(_region(item, path, problems) for path, item in top.items("regions"))
    fleet = FleetSpec(gpu_models=gpu_models, regions=regions)
    _check_unique(fleet, problems)
    problems.raise_if_any()
    return fleet


def _gpu_model(value: object, path: str, problems: _Problems) -> GpuModelSpec:
    fields = _Fields(value, path, problems, known=GPU_MODEL_FIELDS)
    interconnect = fields.text("interconnect", max_length=16)
    if interconnect and interconnect not in INTERCONNECTS:
        problems.add(
            fields.at("interconnect"),
            f"unknown interconnect {interconnect!r} (one of {', '.join(INTERCONNECTS)})",
        )
    profiles: list[str] = []
    for item_path, item in fields.items("mig_profiles"):
        if isinstance(item, str) and item.strip():
            profiles.append(item.strip())
        else:
            problems.add(item_path, f"expected a MIG profile name, got {_kind(item)}")
    return GpuModelSpec(
        slug=fields.text("slug", max_length=64, pattern=SLUG, shape="a slug"),
        name=fields.text("name", max_length=100),
        vendor=fields.text("vendor", max_length=50),
        memory_gib=fields.integer("memory_gib"),
        interconnect=interconnect,
        shareable=fields.flag("shareable", default=False),
        mig_profiles=tuple(profiles),
        source=path,
    )


def _region(value: object, path: str, problems: _Problems) -> RegionSpec:
    fields = _Fields(value, path, problems, known=("slug", "name", "clusters"))
    slug = fields.text("slug", max_length=64, pattern=SLUG, shape="a slug")
    return RegionSpec(
        slug=slug,
        name=fields.text("name", default="", max_length=100) or slug,
        clusters=tuple(_cluster(item, p, problems) for p, item in fields.items("clusters")),
        source=path,
    )


def _cluster(value: object, path: str, problems: _Problems) -> ClusterSpec:
    fields = _Fields(value, path, problems, known=("slug", "name", "racks", "nodes"))
    slug = fields.text("slug", max_length=64, pattern=SLUG, shape="a slug")
    return ClusterSpec(
        slug=slug,
        name=fields.text("name", default="", max_length=100) or slug,
        racks=tuple(_rack(item, p, problems) for p, item in fields.items("racks")),
        nodes=tuple(
            node for p, item in fields.items("nodes") for node in _nodes(item, p, problems)
        ),
        source=path,
    )


def _rack(value: object, path: str, problems: _Problems) -> RackSpec:
    fields = _Fields(value, path, problems, known=("name", "leaf_switch", "spine", "nodes"))
    return RackSpec(
        name=fields.text("name", max_length=64, pattern=HOST_NAME, shape="a rack name"),
        leaf_switch=fields.text("leaf_switch", default="", max_length=64),
        spine=fields.text("spine", default="", max_length=64),
        nodes=tuple(
            node for p, item in fields.items("nodes") for node in _nodes(item, p, problems)
        ),
        source=path,
    )


def _nodes(value: object, path: str, problems: _Problems) -> list[NodeSpec]:
    """One entry of a ``nodes:`` list: one node, or ``count`` of them named by a pattern."""
    fields = _Fields(value, path, problems, known=NODE_FIELDS)
    name = fields.text("name", max_length=128)
    gpus = fields.integer("gpus", default=0, maximum=MAX_GPUS_PER_NODE)
    gpu_model = fields.text("gpu_model", default="", max_length=64) or None
    if gpus and gpu_model is None:
        problems.add(fields.at("gpu_model"), "required field missing (the node has GPUs)")
    if gpu_model is not None and not gpus:
        problems.add(fields.at("gpus"), f"a node of model {gpu_model!r} needs at least 1 GPU")
    spec = NodeSpec(
        name=name,
        gpu_model=gpu_model,
        gpus=gpus,
        cpu_milli=fields.integer("cpu_milli", minimum=1),
        memory_mib=fields.integer("memory_mib", minimum=1, maximum=MAX_BIGINT),
        domain_sizes=_domain_sizes(fields, gpus),
        source=path,
    )
    if not fields.has("count"):
        if fields.has("start"):
            problems.add(fields.at("start"), "only with count (a name pattern)")
        _check_name(fields, name, name)
        return [spec]
    count = fields.integer("count", minimum=1, maximum=MAX_COUNT)
    start = fields.integer("start", default=1)
    if not _is_pattern(name):
        problems.add(
            fields.at("name"), f"with count, the name is a pattern with {{n}}: got {name!r}"
        )
        return []
    names = [name.format(n=n) for n in range(start, start + max(count, 0))]
    for expanded in names:
        if not _check_name(fields, expanded, name):
            break
    return [
        NodeSpec(
            name=expanded,
            gpu_model=spec.gpu_model,
            gpus=spec.gpus,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            domain_sizes=spec.domain_sizes,
            source=path,
        )
        for expanded in names
    ]


def _is_pattern(name: str) -> bool:
    """A name with exactly one ``{n}`` field (a format spec allowed, nothing else: no
    attribute or index lookups, which ``str.format`` would otherwise evaluate)."""
    try:
        fields = [
            (field_name, conversion)
            for _, field_name, _, conversion in string.Formatter().parse(name)
            if field_name is not None
        ]
        name.format(n=0)
    except (ValueError, KeyError, IndexError):
        return False
    return fields == [("n", None)]


def _check_name(fields: _Fields, name: str, written: str) -> bool:
    if not name:
        return False  # already reported as missing
    if len(name) > 128 or not HOST_NAME.match(name):
        problems_name = f"{name!r}" if name == written else f"{name!r} (from {written!r})"
        fields.problems.add(
            fields.at("name"),
            f"{problems_name} is not a node name (letters, digits, '.', '-', '_'; at most 128)",
        )
        return False
    return True


def _domain_sizes(fields: _Fields, gpus: int) -> tuple[int, ...] | None:
    value = fields.raw("nvlink_domains")
    if value is None:
        return None
    where = fields.at("nvlink_domains")
    if not gpus:
        fields.problems.add(where, "a node without GPUs has no NVLink domains")
        return None
    if value == PER_GPU:
        return (1,) * gpus
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1 or value > gpus or gpus % value:
            fields.problems.add(
                where, f"{value} domains do not split {gpus} GPUs evenly (use a list of sizes)"
            )
            return None
        return (gpus // value,) * value
    if isinstance(value, list) and all(
        isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in value
    ):
        if sum(value) != gpus:
            fields.problems.add(where, f"domain sizes {value} add up to {sum(value)}, not {gpus}")
            return None
        return tuple(value)
    fields.problems.add(
        where, f"expected a number of domains, a list of sizes or {PER_GPU!r}, got {_kind(value)}"
    )
    return None


def _check_unique(fleet: FleetSpec, problems: _Problems) -> None:
    """Slugs and names that name one row: GPU models and regions, clusters (across regions),
    racks and nodes (in their cluster)."""

    def unique(kind: str, entries: Iterable[tuple[str, str]]) -> None:
        first: dict[str, str] = {}
        for key, path in entries:
            if not key:
                continue
            if key in first:
                problems.add(path, f"duplicate {kind} {key!r} (also at {first[key]})")
            else:
                first[key] = path

    unique("GPU model", ((m.slug, _join(m.source, "slug")) for m in fleet.gpu_models))
    unique("region", ((r.slug, _join(r.source, "slug")) for r in fleet.regions))
    unique("cluster", ((c.slug, _join(c.source, "slug")) for c in fleet.clusters()))
    for cluster in fleet.clusters():
        unique("rack", ((r.name, _join(r.source, "name")) for r in cluster.racks))
        unique("node", ((n.name, _join(n.source, "name")) for _, n in cluster.all_nodes()))


# --- the Alibaba trace's node list -----------------------------------------------------------

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


def alibaba_nodes_parse(text: str, *, rack_size: int = ALIBABA_RACK_SIZE) -> FleetSpec:
    """The fleet of an ``openb_node_list_*.csv`` of the Alibaba GPU trace v2023.

    Region ``alibaba``, cluster ``openb``; the GPU models of ``ALIBABA_GPU_MODELS``, the ones
    the file uses. Racks: the nodes of each model, in file order, in racks of ``rack_size``
    (``rack-<model>-NN``). NVLink models get one domain per node, PCIe ones a domain per GPU.
    Rows without GPUs (``openb_node_list_all_node.csv`` has 310) become CPU-only nodes, in
    racks ``rack-cpu-NN``. Import one of the two node files, not both: they number ``sn``
    independently, so the same name means different machines.
    """
    problems = _Problems()
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
        where = f"line {reader.line_num}"
        node = _alibaba_node(row, where, problems)
        if node is None:
            continue
        if node.name in seen:
            problems.add(f"{where}.sn", f"duplicate node {node.name!r} (also at {seen[node.name]})")
            continue
        seen[node.name] = where
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
            source=f"racks of {group}",
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


def _alibaba_node(
    row: Mapping[str, str | None], where: str, problems: _Problems
) -> NodeSpec | None:
    def number(column: str, minimum: int) -> int:
        raw = (row.get(column) or "").strip()
        if not raw.isdigit() or int(raw) < minimum:
            problems.add(f"{where}.{column}", f"expected a whole number >= {minimum}, got {raw!r}")
            return 0
        return int(raw)

    name = (row.get("sn") or "").strip()
    if not HOST_NAME.match(name) or len(name) > 128:
        problems.add(f"{where}.sn", f"{name!r} is not a node name")
    gpus = number("gpu", 0)
    if gpus > MAX_GPUS_PER_NODE:
        problems.add(f"{where}.gpu", f"must be at most {MAX_GPUS_PER_NODE}, got {gpus}")
    code = (row.get("model") or "").strip()
    model = ALIBABA_GPU_MODELS.get(code)
    if gpus and model is None:
        problems.add(
            f"{where}.model",
            f"unknown model {code!r} (one of {', '.join(ALIBABA_GPU_MODELS)})"
            if code
            else "required for a node with GPUs",
        )
    if not gpus and code:
        problems.add(f"{where}.model", f"{code!r} given for a node without GPUs")
    node = NodeSpec(
        name=name,
        gpu_model=model.slug if model and gpus else None,
        gpus=gpus,
        cpu_milli=number("cpu_milli", 1),
        memory_mib=number("memory_mib", 1),
        source=where,
    )
    return node if name else None


# --- applying a fleet ------------------------------------------------------------------------


@dataclass
class Tally:
    """What one import did to one kind of thing."""

    new: int = 0
    changed: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        return self.new + self.changed + self.unchanged


@dataclass
class ImportSummary:
    gpu_models: Tally = field(default_factory=Tally)
    regions: Tally = field(default_factory=Tally)
    clusters: Tally = field(default_factory=Tally)
    racks: Tally = field(default_factory=Tally)
    nodes: Tally = field(default_factory=Tally)
    gpus: Tally = field(default_factory=Tally)  # new: on new nodes
    events: int = 0
    dry_run: bool = False

    def rows(self) -> list[tuple[str, Tally]]:
        return [
            ("GPU models", self.gpu_models),
            ("regions", self.regions),
            ("clusters", self.clusters),
            ("racks", self.racks),
            ("nodes", self.nodes),
            ("GPUs", self.gpus),
        ]


def fleet_import(*, actor: Actor, fleet: FleetSpec, dry_run: bool = False) -> ImportSummary:
    """Define every GPU model, region, cluster and rack of ``fleet`` and register its nodes.

    All in one transaction, which takes the append lock first: the fleet cannot change between
    the check against it and the writes, and counting the events each service call appends
    tells exactly what changed. The price: every other writer waits for the import (seconds
    for a thousand nodes). ``FleetInvalid`` (nothing written) when the file names a GPU model
    that is nowhere defined or changes a registered node's GPUs. ``dry_run`` rolls back at the
    end: the summary says what the import would do. Node tokens are not returned: operators
    rotate a node's token to get one.
    """
    with transaction.atomic():
        store.take_append_lock()
        start = store.head_position()
        interconnects = _check_against_fleet(fleet)
        summary = _Applier(actor, start).apply(fleet, interconnects)
        summary.events = Event.objects.filter(position__gt=start).count()
        summary.dry_run = dry_run
        if dry_run:
            transaction.set_rollback(True)
    return summary


def _check_against_fleet(fleet: FleetSpec) -> dict[str, str]:
    """Check what the file can only be checked against the fleet as it is: the GPU models
    its nodes name, the GPUs of nodes already registered. The interconnect of every model."""
    problems = _Problems()
    interconnects = dict(GpuModel.objects.values_list("slug", "interconnect"))
    interconnects.update({model.slug: model.interconnect for model in fleet.gpu_models})
    slugs = [cluster.slug for cluster in fleet.clusters()]
    rows = Node.objects.filter(cluster__slug__in=slugs).values_list(
        "id", "cluster__slug", "name", "gpu_model_id"
    )
    registered = {(cluster, name): (model, node_id) for node_id, cluster, name, model in rows}
    layouts: dict[Any, list[int]] = {}
    for node_id, domain in Gpu.objects.filter(node__cluster__slug__in=slugs).values_list(
        "node_id", "nvlink_domain"
    ):  # ordered by node, index
        layouts.setdefault(node_id, []).append(domain)
    for cluster in fleet.clusters():
        for _, node in cluster.all_nodes():
            if node.gpu_model is not None and node.gpu_model not in interconnects:
                problems.add(_join(node.source, "gpu_model"), f"unknown model {node.gpu_model!r}")
                continue
            known = registered.get((cluster.slug, node.name))
            if known is None:
                continue
            model, node_id = known
            wanted = _domains(node, interconnects)
            if (model, layouts.get(node_id, [])) != (node.gpu_model, wanted):
                problems.add(
                    node.source,
                    f"node {node.name!r} is registered with"
                    f" {_describe(model, layouts.get(node_id, []))}, the file says"
                    f" {_describe(node.gpu_model, wanted)}: an import cannot change a node's"
                    " GPUs (register the machine under a new name)",
                )
    problems.raise_if_any()
    return interconnects


def _domains(node: NodeSpec, interconnects: Mapping[str, str]) -> list[int]:
    """The NVLink domain of each GPU of the node, by index."""
    sizes = node.domain_sizes
    if sizes is None:
        per_gpu = node.gpu_model is not None and interconnects[node.gpu_model] == Interconnect.PCIE
        sizes = (1,) * node.gpus if per_gpu else (node.gpus,)
    return [domain for domain, size in enumerate(sizes) for _ in range(size)]


def _describe(model: str | None, domains: list[int]) -> str:
    if not domains:
        return "no GPUs"
    return f"{len(domains)} GPUs of {model} in {len(set(domains))} NVLink domain(s)"


class _Applier:
    """Calls the services in order, telling new, changed and unchanged apart by whether the
    call appended (the import holds the append lock: no one else can)."""

    def __init__(self, actor: Actor, head: int) -> None:
        self.actor = actor
        self.head = head
        self.summary = ImportSummary()

    def call(self, tally: Tally, existed: bool, service: Callable[..., T], **kwargs: Any) -> T:
        result = atomic_with_retry(service, actor=self.actor, **kwargs)
        head = store.head_position()
        if head == self.head:
            tally.unchanged += 1
        elif existed:
            tally.changed += 1
        else:
            tally.new += 1
        self.head = head
        return result

    def apply(self, fleet: FleetSpec, interconnects: Mapping[str, str]) -> ImportSummary:
        summary = self.summary
        # 1. GPU models; then every model a node names is a row (defined before, or just now).
        known_models = set(GpuModel.objects.values_list("slug", flat=True))
        for model in fleet.gpu_models:
            self.call(
                summary.gpu_models,
                model.slug in known_models,
                services.gpu_model_define,
                slug=model.slug,
                name=model.name,
                vendor=model.vendor,
                memory_gib=model.memory_gib,
                interconnect=model.interconnect,
                shareable=model.shareable,
                mig_profiles=list(model.mig_profiles),
            )
        models = {model.slug: model for model in GpuModel.objects.all()}
        known_regions = set(Region.objects.values_list("slug", flat=True))
        known_clusters = set(Cluster.objects.values_list("slug", flat=True))
        known_racks = set(Rack.objects.values_list("cluster__slug", "name"))
        # 2. The topology, top down: regions, clusters, their racks, then the nodes.
        for region_spec in fleet.regions:
            region = self.call(
                summary.regions,
                region_spec.slug in known_regions,
                services.region_define,
                slug=region_spec.slug,
                name=region_spec.name,
            )
            for cluster_spec in region_spec.clusters:
                cluster = self.call(
                    summary.clusters,
                    cluster_spec.slug in known_clusters,
                    services.cluster_define,
                    region=region,
                    slug=cluster_spec.slug,
                    name=cluster_spec.name,
                )
                racks: dict[str, Rack] = {}
                for rack_spec in cluster_spec.racks:
                    racks[rack_spec.name] = self.call(
                        summary.racks,
                        (cluster_spec.slug, rack_spec.name) in known_racks,
                        services.rack_define,
                        cluster=cluster,
                        name=rack_spec.name,
                        leaf_switch=rack_spec.leaf_switch,
                        spine=rack_spec.spine,
                    )
                for rack_spec_or_none, node in cluster_spec.all_nodes():
                    rack = racks[rack_spec_or_none.name] if rack_spec_or_none else None
                    self._node(cluster, rack, node, models, interconnects)
        return summary

    def _node(
        self,
        cluster: Cluster,
        rack: Rack | None,
        node: NodeSpec,
        models: Mapping[str, GpuModel],
        interconnects: Mapping[str, str],
    ) -> None:
        gpus = [
            services.GpuSlot(index=index, nvlink_domain=domain)
            for index, domain in enumerate(_domains(node, interconnects))
        ]
        before = self.head
        _, token = atomic_with_retry(
            services.node_register,
            actor=self.actor,
            cluster=cluster,
            name=node.name,
            gpu_model=models[node.gpu_model] if node.gpu_model else None,
            cpu_milli=node.cpu_milli,
            memory_mib=node.memory_mib,
            gpus=gpus,
            rack=rack,
        )
        # The token is dropped on purpose: a bulk import prints none (operators rotate one).
        self.head = store.head_position()
        if token is not None:
            self.summary.nodes.new += 1
            self.summary.gpus.new += len(gpus)
            return
        if self.head != before:
            self.summary.nodes.changed += 1
        else:
            self.summary.nodes.unchanged += 1
        self.summary.gpus.unchanged += len(gpus)
