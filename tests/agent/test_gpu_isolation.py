"""On a node with real NVIDIA GPUs, under a real agent (NVML, no fake GPUs): a run opens its
own GPUs' device files and no other's, and CUDA's tools see only its GPUs.

Skipped, saying why, where there is no GPU, the agent is not root, or the host gives the agent
no cgroups to fence device files with (then the heartbeat and the started report say so).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent import cgroups, users
from tests.agent.conftest import AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane
from tests.agent.test_gpus import nvidia_smi_works

PROBE = Path(__file__).with_name("probe.py")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvidia_smi_works(), reason="no NVIDIA GPU here (`nvidia-smi -L`)"),
    pytest.mark.skipif(not users.isolating(), reason="runs get uids of their own only as root"),
]


def device_files() -> dict[str, str]:
    """/dev/nvidia<minor> of each GPU, by index, as NVML tells it."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    return {
        str(i): f"/dev/nvidia{pynvml.nvmlDeviceGetMinorNumber(h)}" for i, h in enumerate(handles)
    }


def test_a_run_opens_only_its_own_gpus_and_cuda_sees_only_them(
    plane: FakeControlPlane, start_agent: Callable[..., AgentProcess]
) -> None:
    if not cgroups.probe().available:
        pytest.skip(f"no cgroups for runs here: {cgroups.probe().note}")
    files = device_files()
    python = subprocess.run(
        ["sh", "-c", "command -v python3"], capture_output=True, text=True, check=True
    ).stdout.strip()
    script = (
        f"{python} {PROBE}; nvidia-smi -L > /dev/null 2>&1; echo smi=$?; "
        "nvidia-smi --query-gpu=uuid --format=csv,noheader 2>&1 | grep -c GPU-"
    )
    checks = json.dumps({"open": files, "self": True})
    plane.assign("own", argv=["sh", "-c", script], env={"PROBE": checks}, gpus=[{"index": 0}])
    plane.assign("none", argv=["sh", "-c", script], env={"PROBE": checks})
    start_agent(real_gpus=True)
    plane.wait_for(lambda: plane.ended("own") and plane.ended("none"), timeout=120)
    own, none = (plane.output(name).decode().splitlines() for name in ("own", "none"))

    print("own:", own, "\nnone:", none, "\nnote:", plane.reports("own", "started")[0]["cgroups"])
    assert json.loads(own[0])["open"]["0"] == "opened"
    assert json.loads(own[0])["uid"] >= 10000
    assert all(v == "denied" for v in json.loads(none[0])["open"].values())
    assert own[-1].strip() == "1"  # nvidia-smi lists the run's one GPU
    assert none[-1].strip() == "0"  # and none to a run without GPUs
