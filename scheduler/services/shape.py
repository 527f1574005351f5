"""What new work may ask for, and where it goes: the bounds of a spec, the GPU models it
names, and the cluster it is queued on. Shared by workloads and reservations.

Reads only, no locks: a model or node that changes meanwhile is the engine's to handle (it
never places work on what cannot hold it). The fleet is read through ``fleet_facts``: once
per change of the fleet, not per request.
"""

from __future__ import annotations

from inventory.models import Cluster
from neocloud.core.errors import ValidationFailed
from scheduler.engine import Topology
from scheduler.errors import Unschedulable
from scheduler.selectors.fleet import FleetFacts, fleet_facts
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


def check_shape(spec: WorkloadSpec, facts: FleetFacts | None = None) -> None:
    """The spec's bounds, and GPU models the fleet knows (``facts``: as read already)."""
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
    facts = facts or fleet_facts()
    unknown = set(spec.gpu_models) - set(facts.gpu_models)
    if unknown:
        raise invalid("gpu_models", f"unknown GPU models: {', '.join(sorted(unknown))}", "unknown")
    if spec.gpu_milli < 1000:
        models = spec.gpu_models or tuple(facts.gpu_models)
        if not any(facts.gpu_models.get(m) for m in models):
            raise invalid("gpu_milli", "none of these GPU models can be shared", "not_shareable")


def cluster_for(spec: WorkloadSpec, facts: FleetFacts | None = None) -> Cluster:
    """The cluster asked for, else the one of the region (any region) with the most GPUs of
    the requested models."""
    facts = facts or fleet_facts()
    if spec.cluster is not None:
        cluster = facts.clusters.get(spec.cluster)
        if cluster is None:
            raise invalid("cluster", "no such cluster", "unknown")
        return cluster
    ranked = facts.clusters_with(spec.gpu_models, spec.region)
    if not ranked:
        where = f" in region {spec.region}" if spec.region else ""
        raise Unschedulable(
            f"no cluster{where} has {' or '.join(spec.gpu_models) or 'GPU'} nodes",
            fields={"gpu_models": ["unavailable"]},
        )
    return ranked[0]
