"""A run's CPU and memory when its assignment names none: its GPUs' share of the node."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agent import shares, users
from agent.config import parse
from agent.loops import Agent

NODE = shares.Node(cpus=64, memory_mib=512 * 1024, gpus=8)


@pytest.mark.parametrize(
    ("gpus", "asked", "given"),
    [
        (2, (0, 0), (16_000, 128 * 1024)),  # 2 of 8 GPUs: a quarter of the node
        (0, (0, 0), (8_000, 64 * 1024)),  # no GPU: one GPU's share
        (2, (1500, 0), (1500, 128 * 1024)),  # what it names, it gets
        (1, (0, 2048), (8_000, 2048)),
    ],
)
def test_a_run_gets_its_gpus_share_of_what_it_did_not_ask_for(
    gpus: int, asked: tuple[int, int], given: tuple[int, int]
) -> None:
    cpu, memory = asked
    assert shares.limits(NODE, gpus=gpus, cpu_milli=cpu, memory_mib=memory) == given


def test_the_node_is_read_from_the_kernel(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    node = shares.this_node(4, tmp_path / "meminfo")
    assert (node.memory_mib, node.gpus) == (16000, 4)
    assert node.cpus >= 1


def test_the_heartbeat_says_what_keeps_runs_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse(
        ["--url", "http://x", "--node-id", "n", "--token-file", "t", "--state-dir", "s"], {}
    )
    agent = SimpleNamespace(config=config)

    monkeypatch.setattr(users, "isolating", lambda: True)
    assert Agent.isolation(agent) == "a uid of its own per run (4000000-4099999)"  # type: ignore[arg-type]
    monkeypatch.setattr(users, "isolating", lambda: False)
    assert Agent.isolation(agent).startswith("none: the agent is not root")  # type: ignore[arg-type]
