"""The parsed fleet: plain frozen values that either file format becomes, and that planning
and applying an import read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuModelSpec:
    slug: str
    name: str
    vendor: str
    memory_gib: int
    interconnect: str
    shareable: bool
    mig_profiles: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_model: str | None
    gpus: int
    cpu_milli: int
    memory_mib: int
    # Sizes of the NVLink domains, in GPU index order; None: by the model's interconnect.
    domain_sizes: tuple[int, ...] | None = None
    driver: str = ""  # the node's own provisioning driver ("": the deployment's)
    source: str = field(default="", compare=False)  # where the file says it, for errors


@dataclass(frozen=True)
class RackSpec:
    name: str
    leaf_switch: str
    spine: str
    nodes: tuple[NodeSpec, ...]


@dataclass(frozen=True)
class ClusterSpec:
    slug: str
    name: str
    racks: tuple[RackSpec, ...]
    nodes: tuple[NodeSpec, ...] = ()  # in no rack

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


@dataclass(frozen=True)
class FleetSpec:
    gpu_models: tuple[GpuModelSpec, ...]
    regions: tuple[RegionSpec, ...]

    def clusters(self) -> Iterator[ClusterSpec]:
        for region in self.regions:
            yield from region.clusters
