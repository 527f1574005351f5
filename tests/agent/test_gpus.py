"""GPU discovery: NVML's answers mapped to health, fake GPUs, and no GPUs at all."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.gpus import FakeGpus, GpuDiscoveryError, NvmlGpus, discover
from tests.agent.conftest import ROOT

GIB = 1024**3
GPU_IS_LOST, NOT_SUPPORTED, TIMEOUT = 15, 3, 10


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeDevice:
    uuid: str
    ecc: int | Exception = 0
    lost: bool = False
    utilization: int = 0
    used: int = 0


@dataclass
class FakeNvml:
    """The part of pynvml the agent uses, over a list of devices."""

    devices: list[FakeDevice]
    xids: list[tuple[int, int]] = field(default_factory=list)  # (device index, xid)

    def module(self) -> types.ModuleType:
        nvml = types.ModuleType("pynvml")
        nvml.__dict__.update(
            NVMLError=NVMLError,
            NVML_ERROR_GPU_IS_LOST=GPU_IS_LOST,
            NVML_ERROR_NOT_SUPPORTED=NOT_SUPPORTED,
            NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
            NVML_VOLATILE_ECC=0,
            nvmlEventTypeXidCriticalError=8,
            nvmlInit=lambda: None,
            nvmlDeviceGetCount=lambda: len(self.devices),
            nvmlDeviceGetHandleByIndex=self.handle,
            nvmlDeviceGetUUID=lambda h: h.uuid.encode(),  # bytes, as older bindings answer
            nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
            # /dev/nvidia<minor>: the minor need not be the index (here it runs backwards)
            nvmlDeviceGetMinorNumber=lambda h: len(self.devices) - 1 - self.devices.index(h),
            nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * GIB, used=h.used),
            nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=h.utilization),
            nvmlDeviceGetTotalEccErrors=self.ecc,
            nvmlEventSetCreate=lambda: "events",
            nvmlDeviceRegisterEvents=lambda h, kinds, events: None,
            nvmlEventSetWait=self.wait,
        )
        return nvml

    def handle(self, index: int) -> FakeDevice:
        device = self.devices[index]
        if device.lost:
            raise NVMLError(GPU_IS_LOST)
        return device

    def ecc(self, device: FakeDevice, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)  # uncorrected, volatile
        if isinstance(device.ecc, Exception):
            raise device.ecc
        return device.ecc

    def wait(self, events: Any, timeout_ms: int) -> Any:
        if not self.xids:
            raise NVMLError(TIMEOUT)
        index, xid = self.xids.pop(0)
        return types.SimpleNamespace(device=self.devices[index], eventData=xid)


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml([FakeDevice(f"GPU-{i}") for i in range(4)])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    return fake


def test_a_gpus_device_file_is_named_by_its_minor_number_not_its_index(nvml: FakeNvml) -> None:
    assert NvmlGpus().device_files() == {i: f"/dev/nvidia{3 - i}" for i in range(4)}


def test_nvml_gpus_are_reported_with_their_usage(nvml: FakeNvml) -> None:
    nvml.devices[1].utilization, nvml.devices[1].used = 37, 2 * GIB

    gpus = NvmlGpus().read()

    assert [(g.index, g.uuid, g.memory_mib, g.healthy) for g in gpus] == [
        (i, f"GPU-{i}", 81920, True) for i in range(4)
    ]
    assert (gpus[1].utilization_pct, gpus[1].memory_used_mib) == (37.0, 2048)
    assert gpus[0].model == "NVIDIA H100 80GB HBM3"


def test_nvml_health_maps_lost_gpus_ecc_and_xids(nvml: FakeNvml) -> None:
    source = NvmlGpus()
    nvml.devices[0].lost = True
    nvml.devices[1].ecc = 2
    nvml.devices[2].ecc = NVMLError(NOT_SUPPORTED)  # no ECC on this card: not a failure
    nvml.xids = [(3, 79), (2, 13)]  # 13 (a program's fault) is not the GPU's

    gpus = source.read()

    assert [(g.healthy, g.reason) for g in gpus] == [
        (False, "fallen off the bus (NVML_ERROR_GPU_IS_LOST)"),
        (False, "uncorrectable ECC errors: 2 (volatile)"),
        (True, ""),
        (False, "Xid 79"),
    ]
    assert gpus[0].uuid == "GPU-0"  # known from discovery, though the GPU is gone now
    assert [g.healthy for g in source.read()] == [False, False, True, False]  # Xids stick


def test_real_gpus_are_named_by_uuid_for_cuda(nvml: FakeNvml) -> None:
    assert NvmlGpus().device_ids([2, 3]) == ["GPU-2", "GPU-3"]


def test_fake_gpus_say_so_and_are_named_by_index() -> None:
    gpus = discover(fake_gpus=2, gpu_model="NVIDIA A100", node_id="0123456789abcdef")

    assert isinstance(gpus, FakeGpus)
    assert gpus.fake
    assert [g.uuid for g in gpus.read()] == ["GPU-fake-01234567-0", "GPU-fake-01234567-1"]
    assert gpus.device_ids([1]) == ["1"]


def test_without_nvml_or_fake_gpus_discovery_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails

    with pytest.raises(GpuDiscoveryError, match="--fake-gpus N --gpu-model M"):
        discover(fake_gpus=None, gpu_model="", node_id="n")


def nvidia_smi_works() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0


def test_the_agent_without_gpus_exits_with_a_clear_error(tmp_path: Any) -> None:
    if nvidia_smi_works():
        pytest.skip("this machine has NVIDIA GPUs: NVML works")
    argv = [sys.executable, "-m", "agent.cli", "--url", "http://127.0.0.1:9", "--node-id", "n"]
    argv += ["--token-file", str(tmp_path / "t"), "--state-dir", str(tmp_path / "s")]

    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)

    assert done.returncode == 2
    assert "no GPUs" in done.stderr
    assert "--fake-gpus N --gpu-model M" in done.stderr


@pytest.mark.gpu
def test_nvml_finds_the_gpus_nvidia_smi_lists() -> None:
    if not nvidia_smi_works():
        pytest.skip("no NVIDIA GPU here (`nvidia-smi -L` does not work)")
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)

    gpus = NvmlGpus().read()

    assert [g.uuid for g in gpus] == [
        line.rsplit("UUID: ", 1)[1].rstrip(")") for line in listed.stdout.splitlines()
    ]
    assert all(g.memory_mib > 0 and g.model for g in gpus)
