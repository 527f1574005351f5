"""What new work may ask for, and where it goes: the bounds of a spec, the GPU models it
names, and the cluster it is queued on. Shared by workloads and reservations.

Reads only, no locks: a model or node that changes meanwhile is the engine's to handle (it
never places work on what cannot hold it).
"""

from __future__ import annotations

from django.db.models import Count

from inventory.models import Cluster, GpuModel
from inventory.selectors import nodes_in_service
from neocloud.core.errors import ValidationFailed
from scheduler.engine import Topology
from scheduler.errors import Unschedulable
from scheduler.specs import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MAX_NODES,
    MAX_RETRY_LIMIT,
    MAX_RUNTIME_S,
    RestartPolicy,
    WorkloadKind,
    WorkloadSpec,
)

TOPOLOGIES = frozenset(Topology)


def invalid(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(message, fields={field: [code]})


def check_shape(spec: WorkloadSpec) -> None:
    if not spec.name.strip():
        raise invalid("name", "a workload needs a name", "required")
    if not 1 <= spec.gpus_per_node <= MAX_GPUS_PER_NODE:
        raise invalid("gpus_per_node", f"gpus_per_node must be between 1 and {MAX_GPUS_PER_NODE}")
    if not 1 <= spec.nodes <= MAX_NODES:
        raise invalid("nodes", f"nodes must be between 1 and {MAX_NODES}")
    if spec.min_nodes is not None and not 1 <= spec.min_nodes <= spec.nodes:
        raise invalid("min_nodes", "min_nodes must be between 1 and nodes")
    if not 1 <= spec.gpu_milli <= 1000:
        raise invalid("gpu_milli", "gpu_milli must be between 1 and 1000")
    if spec.gpu_milli < 1000 and (spec.gpus_per_node != 1 or spec.nodes != 1):
        raise invalid("gpu_milli", "a fraction of a GPU is asked for one GPU on one node")
    if spec.topology not in TOPOLOGIES:
        raise invalid("topology", f"topology must be one of {', '.join(Topology)}")
    if spec.topology == Topology.SINGLE_NODE and spec.nodes != 1:
        raise invalid("topology", "a single_node workload has nodes = 1")
    for name in ("runtime_estimate_s", "max_runtime_s"):
        value = getattr(spec, name)
        if value is not None and not 0 < value <= MAX_RUNTIME_S:
            raise invalid(name, f"{name} must be positive and at most {MAX_RUNTIME_S} s")
    if not 0 <= spec.cpu_milli <= MAX_CPU_MILLI:
        raise invalid("cpu_milli", f"cpu_milli must be between 0 and {MAX_CPU_MILLI}")
    if not 0 <= spec.memory_mib <= MAX_MEMORY_MIB:
        raise invalid("memory_mib", f"memory_mib must be between 0 and {MAX_MEMORY_MIB}")
    if not 0 <= spec.retry_limit <= MAX_RETRY_LIMIT:
        raise invalid("retry_limit", f"retry_limit must be between 0 and {MAX_RETRY_LIMIT}")
    if spec.kind is WorkloadKind.JOB and spec.restart_policy is RestartPolicy.ALWAYS:
        raise invalid("restart_policy", "a job is retried by retry_limit, not restarted always")
    unknown = set(spec.gpu_models) - set(
        GpuModel.objects.filter(slug__in=spec.gpu_models).values_list("slug", flat=True)
    )
    if unknown:
        raise invalid("gpu_models", f"unknown GPU models: {', '.join(sorted(unknown))}", "unknown")
    if spec.gpu_milli < 1000:
        shareable = GpuModel.objects.filter(shareable=True)
        if spec.gpu_models:
            shareable = shareable.filter(slug__in=spec.gpu_models)
        if not shareable.exists():
            raise invalid("gpu_milli", "none of these GPU models can be shared", "not_shareable")


def cluster_for(spec: WorkloadSpec) -> Cluster:
    """The cluster asked for, else the one of the region (any region) with the most GPUs of
    the requested models."""
    if spec.cluster is not None:
        cluster = Cluster.objects.filter(pk=spec.cluster).first()
        if cluster is None:
            raise invalid("cluster", "no such cluster", "unknown")
        return cluster
    nodes = nodes_in_service()
    if spec.gpu_models:
        nodes = nodes.filter(gpu_model__in=spec.gpu_models)
    else:
        nodes = nodes.filter(gpu_model__isnull=False)
    if spec.region:
        nodes = nodes.filter(cluster__region_id=spec.region)
    best = (
        nodes.values("cluster_id")
        .annotate(gpu_total=Count("gpus"))
        .order_by("-gpu_total", "cluster_id")
        .first()
    )
    if best is None:
        where = f" in region {spec.region}" if spec.region else ""
        raise Unschedulable(
            f"no cluster{where} has {' or '.join(spec.gpu_models) or 'GPU'} nodes",
            fields={"gpu_models": ["unavailable"]},
        )
    return Cluster.objects.get(pk=best["cluster_id"])
