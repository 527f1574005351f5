"""The fleet YAML file, as pydantic models: ``fleet_parse`` checks the untrusted document and
turns it into a ``FleetSpec``, or raises ``FleetInvalid`` naming every problem found.

The format (``examples/fleet.yaml`` is a complete example)::

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
                    driver: agent       # default: the deployment's PROVISIONING_DRIVER
            nodes: []                 # nodes in no rack (optional)

``nvlink_domains`` says how a node's GPUs split into NVLink domains (GPUs of one domain talk
over NVLink/NVSwitch, across domains over PCIe): an integer k cuts the GPUs into k equal
groups of consecutive indexes (1: one domain, as on an 8-GPU NVSwitch board), a list gives the
group sizes (``[4, 4]``), ``per-gpu`` puts every GPU alone (PCIe cards). By default it follows
the model's interconnect: one domain for ``nvswitch`` and ``nvlink``, per GPU for ``pcie``.

Names of nodes and racks are host-like (letters, digits, ``.``, ``-``, ``_``); unknown fields
are errors, so a typo never passes silently; a field given no value (``spine:``) is as if left
out. Errors name their place, e.g.
``regions[0].clusters[1].racks[0].nodes[2].gpu_model: unknown model 'h200'``.

The checks run in passes: every field of the file first; then the rules that span an entry's
fields (a node's GPUs and model, its NVLink domains, its name pattern), in each entry whose
fields are right; then, once all of that holds, the names that must be unique. Each pass
reports all it finds.
"""

from __future__ import annotations

import string
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Literal, Self

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from inventory.fleet_import.fields import (
    HOST_NAME,
    MAX_BIGINT,
    MAX_COUNT,
    MAX_GPUS_PER_NODE,
    MAX_INT,
    MAX_NAME,
    SLUG,
    FilledText,
    Text,
    shaped,
)
from inventory.fleet_import.problems import (
    FleetInvalid,
    Loc,
    Problems,
    kind,
    path_of,
    problem,
    problems_at,
)
from inventory.fleet_import.spec import (
    ClusterSpec,
    FleetSpec,
    GpuModelSpec,
    NodeSpec,
    RackSpec,
    RegionSpec,
)
from inventory.models import Interconnect

PER_GPU = "per-gpu"
INTERCONNECTS = tuple(choice.value for choice in Interconnect)

Slug = Annotated[FilledText, Field(max_length=64), shaped(SLUG, "a slug")]
Title = Annotated[Text, Field(max_length=100)]  # a display name: the slug when empty


def _interconnect(value: str) -> str:
    if value not in INTERCONNECTS:
        raise problem(f"unknown interconnect {value!r} (one of {', '.join(INTERCONNECTS)})")
    return value


def _mig_profile(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise problem(f"expected a MIG profile name, got {kind(value)}")
    return value.strip()


def _domain_layout(value: object) -> int | tuple[int, ...] | str:
    """``nvlink_domains`` as written: a count, a list of sizes, or ``per-gpu``; whether it
    fits the node's GPUs is the node's rule."""
    if value == PER_GPU:
        return PER_GPU
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and all(
        isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in value
    ):
        return tuple(value)
    raise problem(
        f"expected a number of domains, a list of sizes or {PER_GPU!r}, got {kind(value)}"
    )


class Entry(BaseModel):
    """One mapping of the file: its fields exactly, with their types as YAML writes them (no
    ``"8"`` for 8, no ``yes`` for true)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _absent_if_null(cls, data: object) -> object:
        if isinstance(data, Mapping):
            return {
                str(key): value
                for key, value in data.items()
                if value is not None or str(key) not in cls.model_fields
            }
        return data


class GpuModelEntry(Entry):
    slug: Slug
    name: Annotated[FilledText, Field(max_length=100)]
    vendor: Annotated[FilledText, Field(max_length=50)]
    memory_gib: int = Field(ge=0, le=MAX_INT)
    interconnect: Annotated[FilledText, AfterValidator(_interconnect)]
    shareable: bool = False
    mig_profiles: list[Annotated[str, BeforeValidator(_mig_profile)]] = []

    def spec(self) -> GpuModelSpec:
        return GpuModelSpec(**{**self.model_dump(), "mig_profiles": tuple(self.mig_profiles)})


class NodeEntry(Entry):
    """One entry of a ``nodes:`` list: one node, or ``count`` of them named by a pattern."""

    name: Annotated[FilledText, Field(max_length=MAX_NAME)]
    count: int | None = Field(None, ge=1, le=MAX_COUNT)
    start: int = Field(1, ge=0, le=MAX_INT)
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    gpu_model: Annotated[Text, Field(max_length=64)] = ""
    nvlink_domains: Annotated[
        int | tuple[int, ...] | str | None, BeforeValidator(_domain_layout)
    ] = None
    cpu_milli: int = Field(ge=1, le=MAX_INT)
    memory_mib: int = Field(ge=1, le=MAX_BIGINT)
    # The node's own provisioning driver ("": the deployment's), one of ``drivers.DRIVERS``.
    driver: Literal["", "simulated", "agent"] = ""

    @field_validator("start", mode="wrap")
    @classmethod
    def _only_with_count(
        cls, value: object, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> int:
        if "count" in info.data and info.data["count"] is None:  # left out, not wrong
            raise problem("only with count (a name pattern)")
        start: int = handler(value)
        return start

    @model_validator(mode="after")
    def _fits(self) -> Self:
        found: list[tuple[Loc, str]] = []
        if self.gpus and not self.gpu_model:
            found.append((("gpu_model",), "required field missing (the node has GPUs)"))
        if self.gpu_model and not self.gpus:
            found.append((("gpus",), f"a node of model {self.gpu_model!r} needs at least 1 GPU"))
        if (wrong := self._layout_problem()) is not None:
            found.append((("nvlink_domains",), wrong))
        if self.count is not None and not _is_pattern(self.name):
            found.append(
                (("name",), f"with count, the name is a pattern with {{n}}: got {self.name!r}")
            )
        elif (wrong := self._name_problem()) is not None:
            found.append((("name",), wrong))
        if found:
            raise problems_at("node", found)
        return self

    def _layout_problem(self) -> str | None:
        layout, gpus = self.nvlink_domains, self.gpus
        if layout is None:
            return None
        if not gpus:
            return "a node without GPUs has no NVLink domains"
        if isinstance(layout, int) and (layout < 1 or layout > gpus or gpus % layout):
            return f"{layout} domains do not split {gpus} GPUs evenly (use a list of sizes)"
        if isinstance(layout, tuple) and sum(layout) != gpus:
            return f"domain sizes {list(layout)} add up to {sum(layout)}, not {gpus}"
        return None

    def _name_problem(self) -> str | None:
        """The first name that is no node name (a pattern's names are checked in order)."""
        for name in self.names():
            if len(name) > MAX_NAME or not HOST_NAME.match(name):
                written = "" if name == self.name else f" (from {self.name!r})"
                return (
                    f"{name!r}{written} is not a node name (letters, digits, '.', '-', '_';"
                    f" at most {MAX_NAME})"
                )
        return None

    def names(self) -> list[str]:
        if self.count is None:
            return [self.name]
        return [self.name.format(n=n) for n in range(self.start, self.start + self.count)]

    def domain_sizes(self) -> tuple[int, ...] | None:
        layout = self.nvlink_domains
        if layout is None or isinstance(layout, tuple):
            return layout
        if isinstance(layout, str):  # per-gpu
            return (1,) * self.gpus
        return (self.gpus // layout,) * layout

    def specs(self, loc: Loc) -> list[NodeSpec]:
        """Its nodes, each naming the entry's place for the checks against the fleet."""
        return [
            NodeSpec(
                name=name,
                gpu_model=self.gpu_model or None,
                gpus=self.gpus,
                cpu_milli=self.cpu_milli,
                memory_mib=self.memory_mib,
                domain_sizes=self.domain_sizes(),
                driver=self.driver,
                source=path_of(loc),
            )
            for name in self.names()
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


class RackEntry(Entry):
    name: Annotated[FilledText, Field(max_length=64), shaped(HOST_NAME, "a rack name")]
    leaf_switch: Annotated[Text, Field(max_length=64)] = ""
    spine: Annotated[Text, Field(max_length=64)] = ""
    nodes: list[NodeEntry] = []

    def spec(self, loc: Loc) -> RackSpec:
        return RackSpec(
            name=self.name,
            leaf_switch=self.leaf_switch,
            spine=self.spine,
            nodes=_node_specs(self.nodes, (*loc, "nodes")),
        )


def _node_specs(entries: list[NodeEntry], loc: Loc) -> tuple[NodeSpec, ...]:
    return tuple(spec for i, node in enumerate(entries) for spec in node.specs((*loc, i)))


class ClusterEntry(Entry):
    slug: Slug
    name: Title = ""
    racks: list[RackEntry] = []
    nodes: list[NodeEntry] = []  # in no rack

    def located_nodes(self, loc: Loc) -> Iterator[tuple[Loc, NodeEntry]]:
        """Each node entry with its place: the racks' in order, then those in no rack."""
        for index, rack in enumerate(self.racks):
            for at, node in enumerate(rack.nodes):
                yield (*loc, "racks", index, "nodes", at), node
        for at, node in enumerate(self.nodes):
            yield (*loc, "nodes", at), node

    def spec(self, loc: Loc) -> ClusterSpec:
        return ClusterSpec(
            slug=self.slug,
            name=self.name or self.slug,
            racks=tuple(rack.spec((*loc, "racks", i)) for i, rack in enumerate(self.racks)),
            nodes=_node_specs(self.nodes, (*loc, "nodes")),
        )


class RegionEntry(Entry):
    slug: Slug
    name: Title = ""
    clusters: list[ClusterEntry] = []

    def spec(self, loc: Loc) -> RegionSpec:
        return RegionSpec(
            slug=self.slug,
            name=self.name or self.slug,
            clusters=tuple(
                cluster.spec((*loc, "clusters", i)) for i, cluster in enumerate(self.clusters)
            ),
        )


class FleetFile(Entry):
    gpu_models: list[GpuModelEntry] = []
    regions: list[RegionEntry] = []

    @model_validator(mode="after")
    def _unique(self) -> Self:
        """Slugs and names that name one row: GPU models and regions, clusters (across
        regions), racks and nodes (in their cluster)."""
        clusters = list(self.located_clusters())
        found = [
            *_duplicates(
                "GPU model",
                (
                    (model.slug, ("gpu_models", i, "slug"))
                    for i, model in enumerate(self.gpu_models)
                ),
            ),
            *_duplicates(
                "region",
                ((region.slug, ("regions", i, "slug")) for i, region in enumerate(self.regions)),
            ),
            *_duplicates("cluster", ((cluster.slug, (*loc, "slug")) for loc, cluster in clusters)),
        ]
        for loc, cluster in clusters:
            found += _duplicates(
                "rack",
                ((rack.name, (*loc, "racks", i, "name")) for i, rack in enumerate(cluster.racks)),
            )
            found += _duplicates(
                "node",
                (
                    (name, (*at, "name"))
                    for at, node in cluster.located_nodes(loc)
                    for name in node.names()
                ),
            )
        if found:
            raise problems_at("fleet", found)
        return self

    def located_clusters(self) -> Iterator[tuple[Loc, ClusterEntry]]:
        for i, region in enumerate(self.regions):
            for j, cluster in enumerate(region.clusters):
                yield ("regions", i, "clusters", j), cluster

    @classmethod
    def known_fields(cls, loc: Loc) -> list[str]:
        """The fields of the entry at ``loc``, to name them beside an unknown one."""
        entry: type[BaseModel] = cls
        for part in loc:
            if isinstance(part, str):
                (entry,) = typing.get_args(entry.model_fields[part].annotation)
        return list(entry.model_fields)

    def spec(self) -> FleetSpec:
        return FleetSpec(
            gpu_models=tuple(model.spec() for model in self.gpu_models),
            regions=tuple(region.spec(("regions", i)) for i, region in enumerate(self.regions)),
        )


def _duplicates(what: str, entries: Iterable[tuple[str, Loc]]) -> list[tuple[Loc, str]]:
    first: dict[str, Loc] = {}
    found = []
    for key, loc in entries:
        if key in first:
            found.append((loc, f"duplicate {what} {key!r} (also at {path_of(first[key])})"))
        else:
            first[key] = loc
    return found


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
    if data is None:
        raise FleetInvalid.of({"(file)": ["the file is empty"]})
    try:
        fleet = FleetFile.model_validate(data)
    except ValidationError as exc:
        problems = Problems()
        problems.add_errors(exc, known_fields=FleetFile.known_fields)
        raise FleetInvalid.of(problems.items) from exc
    return fleet.spec()
