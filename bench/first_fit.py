"""The scheduler benchmark's baselines: naive first-fit, node by node and by groups of nodes.

Both place the same workloads on the same nodes: arrival order, each workload on the first
nodes by name with enough free GPUs, CPU and memory (the first free GPUs of each; a share of
one GPU on the first GPU of a shareable node with room for it); no quotas, priorities,
topology or fragmentation. ``first_fit`` looks at every node for every workload, the floor any
scheduler pays that looks at each node. ``grouped_first_fit`` groups nodes of identical GPU
state as the engine does (its ``Capacity`` classes) and weighs each group once, reading only
CPU and memory node by node: the same shortcut the engine takes, so the engine's ratio to it is
what its policies cost, not what grouping saves. Each returns where it placed every workload it
placed (the benchmark counts them; a test checks the two agree).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.engine import Allocation, Placement, Request, Snapshot
from scheduler.engine.capacity import Capacity
from scheduler.engine.model import WHOLE


def _arrival(pending: list[Request]) -> list[Request]:
    return sorted(pending, key=lambda r: (r.submitted_at, r.id))


def _first_gpus(free: Sequence[int], shareable: bool, request: Request) -> list[int] | None:
    """The GPUs first-fit takes on a node with these free shares, or None."""
    if request.fractional:
        if not shareable:
            return None
        gpus = [i for i, f in enumerate(free) if f >= request.gpu_milli][:1]
    else:
        gpus = [i for i, f in enumerate(free) if f == WHOLE][: request.gpus_per_node]
    return gpus if gpus and len(gpus) == request.gpus_per_node else None


# Workload id -> (node, GPU indexes) of each of its nodes.
Placed = dict[str, list[tuple[str, list[int]]]]


def first_fit(snapshot: Snapshot, pending: list[Request]) -> Placed:
    """Every node weighed for every workload. Returns where each placed workload went."""
    nodes = sorted(snapshot.nodes, key=lambda n: n.name)
    gpu_free = {n.name: [WHOLE] * n.gpu_count for n in nodes}
    cpu_free = {n.name: n.cpu_milli for n in nodes}
    memory_free = {n.name: n.memory_mib for n in nodes}
    for allocation in snapshot.allocations:
        for p in allocation.placements:
            for index in p.gpus:
                gpu_free[p.node][index] -= p.gpu_milli
            cpu_free[p.node] -= p.cpu_milli
            memory_free[p.node] -= p.memory_mib
    placed: Placed = {}
    for request in _arrival(pending):
        hosts: list[tuple[str, list[int]]] = []
        for node in nodes:
            if not node.schedulable or (
                request.gpu_models and node.gpu_model not in request.gpu_models
            ):
                continue
            name = node.name
            if cpu_free[name] < request.cpu_milli or memory_free[name] < request.memory_mib:
                continue
            gpus = _first_gpus(gpu_free[name], node.shareable, request)
            if gpus is not None:
                hosts.append((name, gpus))
                if len(hosts) == request.nodes:
                    break
        if len(hosts) < request.nodes:
            continue
        for name, gpus in hosts:
            for index in gpus:
                gpu_free[name][index] -= request.gpu_milli
            cpu_free[name] -= request.cpu_milli
            memory_free[name] -= request.memory_mib
        placed[request.id] = hosts
    return placed


def grouped_first_fit(snapshot: Snapshot, pending: list[Request]) -> Placed:
    """``first_fit``'s placements, each group of nodes in one GPU state weighed once (what it
    takes there is remembered from one workload to the next: states do not change)."""
    capacity = Capacity(snapshot)
    takes: dict[tuple[int, int, int], list[int] | None] = {}
    placed: Placed = {}
    for request in _arrival(pending):
        cpu, memory = request.cpu_milli, request.memory_mib
        hosts: list[tuple[str, list[int]]] = []
        for model in request.gpu_models or (None,):
            for state_id, members in capacity.classes(model):
                key = (state_id, request.gpu_milli, request.gpus_per_node)
                if key in takes:
                    gpus = takes[key]
                else:
                    free, _domains, shareable = capacity.states[state_id]
                    gpus = takes[key] = _first_gpus(free, shareable, request)
                if gpus is None:
                    continue
                found = 0
                for host in members:  # sorted by name: the first with the CPU and memory
                    if host.cpu >= cpu and host.memory >= memory:
                        hosts.append((host.name, gpus))
                        found += 1
                        if found == request.nodes:
                            break
        if len(hosts) < request.nodes:
            continue
        hosts = sorted(hosts)[: request.nodes]
        placements = tuple(
            Placement(name, tuple(gpus), request.gpu_milli, cpu, memory) for name, gpus in hosts
        )
        model_of = capacity.nodes[placements[0].node].gpu_model
        capacity.take(Allocation(request.id, request.queue, model_of, placements))
        placed[request.id] = hosts
    return placed
