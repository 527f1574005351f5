"""A run's CPU and memory when its assignment names none: its GPUs' share of the node.

A node sold by the GPU is sold with the CPUs and memory that go with each GPU: a run that
asked for no limit still gets its share (a run without GPUs, one GPU's), so one run cannot
starve the others on the node of CPU or memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Node:
    cpus: int
    memory_mib: int
    gpus: int


def this_node(gpus: int, meminfo: Path = Path("/proc/meminfo")) -> Node:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory_kib = 0
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    return Node(cpus=cpus or 1, memory_mib=memory_kib // 1024, gpus=gpus)


def limits(node: Node, *, gpus: int, cpu_milli: int, memory_mib: int) -> tuple[int, int]:
    """(cpu_milli, memory_mib): the assignment's own where it names them, else the share of
    ``gpus`` GPUs (at least one) of the node's CPUs and memory."""
    fraction = max(1, gpus) / max(1, node.gpus)
    share_cpu = max(100, int(node.cpus * 1000 * fraction))
    share_memory = max(64, int(node.memory_mib * fraction))
    return (cpu_milli or share_cpu, memory_mib or share_memory)
