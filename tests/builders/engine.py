"""Fluent-enough builders of engine inputs for table-driven tests."""

from __future__ import annotations

from scheduler.engine import Allocation, Node, Placement, Request


def nodes(
    prefix: str,
    count: int,
    *,
    gpus: int = 8,
    model: str = "h100",
    rack: str = "r1",
    domains: int = 1,
    shareable: bool = False,
) -> list[Node]:
    per_domain = max(gpus // domains, 1)
    return [
        Node(
            name=f"{prefix}{i}",
            gpu_model=model,
            rack=rack,
            cpu_milli=96_000,
            memory_mib=1_048_576,
            shareable=shareable,
            gpu_domains=tuple(g // per_domain for g in range(gpus)),
        )
        for i in range(count)
    ]


def job(id: str, gpus: int = 1, *, nodes: int = 1, queue: str = "q", **kwargs: object) -> Request:
    return Request(id=id, queue=queue, gpus_per_node=gpus, nodes=nodes, **kwargs)  # type: ignore[arg-type]


def running(
    workload: str,
    node: str,
    gpus: tuple[int, ...],
    *,
    queue: str = "q",
    model: str = "h100",
    priority: int = 0,
    preemptible: bool = False,
    started_at: float = 0.0,
    ends_at: float | None = None,
    milli: int = 1000,
    reservation: str | None = None,
) -> Allocation:
    return Allocation(
        workload=workload,
        queue=queue,
        gpu_model=model,
        priority=priority,
        preemptible=preemptible,
        started_at=started_at,
        ends_at=ends_at,
        reservation=reservation,
        placements=(Placement(node=node, gpus=gpus, gpu_milli=milli, cpu_milli=0, memory_mib=0),),
    )
