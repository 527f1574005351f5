"""Planning an import: what a file can only be checked against the fleet as it is, and the
GPUs each node will have.

A node may name a GPU model defined before (in no file, or an earlier one); a registered
node's GPUs (model, count, NVLink domains) cannot be changed by an import, as no event says
so: such a file is refused, naming the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inventory.fleet_import.problems import Problems, path_of
from inventory.fleet_import.spec import FleetSpec, NodeSpec
from inventory.models import Gpu, GpuModel, Interconnect, Node


def check_against_fleet(fleet: FleetSpec) -> dict[str, str]:
    """Check the GPU models the file's nodes name and the GPUs of nodes already registered;
    the interconnect of every model, by slug. ``FleetInvalid`` names every problem."""
    problems = Problems()
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
                problems.add(
                    path_of(("gpu_model",), node.source), f"unknown model {node.gpu_model!r}"
                )
                continue
            known = registered.get((cluster.slug, node.name))
            if known is None:
                continue
            model, node_id = known
            wanted = gpu_domains(node, interconnects)
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


def gpu_domains(node: NodeSpec, interconnects: Mapping[str, str]) -> list[int]:
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
