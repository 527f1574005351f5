"""The node's GPUs: through NVML (``pynvml``, from nvidia-ml-py), or fake ones that say so.

Health, as NVML tells it: a device that answers ``NVML_ERROR_GPU_IS_LOST`` has fallen off
the bus; one with uncorrectable ECC errors (volatile count > 0) is failing; an Xid event
NVIDIA documents as needing a reset (read from an NVML event set, without waiting) marks the
GPU unhealthy for the rest of the agent's life.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

# Xid errors after which a GPU needs a reset or a drain (NVIDIA's Xid catalogue): double-bit
# ECC, micro-controller halt, ECC page retirement or row-remap failure, NVLink, fallen off the
# bus, contained and uncontained ECC.
FATAL_XIDS = frozenset({48, 62, 64, 74, 79, 94, 95})
_MIB = 1024 * 1024


class GpuDiscoveryError(Exception):
    """Neither NVML nor ``--fake-gpus``: the agent cannot say what it has, so it won't run."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    model: str
    memory_mib: int
    healthy: bool = True
    reason: str = ""
    utilization_pct: float = 0.0
    memory_used_mib: int = 0

    def as_report(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "memory_mib": self.memory_mib,
            "healthy": self.healthy,
            "reason": self.reason,
            "utilization_pct": self.utilization_pct,
            "memory_used_mib": self.memory_used_mib,
        }


class Gpus(Protocol):
    fake: bool

    def read(self) -> list[Gpu]: ...

    def device_ids(self, indices: list[int]) -> list[str]:
        """What CUDA_VISIBLE_DEVICES names for these GPUs."""
        ...

    def device_files(self) -> dict[int, str]:
        """Each GPU's device file by index: what a run may open only for its own GPUs."""
        ...


class FakeGpus:
    """``--fake-gpus N --gpu-model M``: idle, healthy, and marked fake in every heartbeat."""

    fake = True

    def __init__(self, count: int, model: str, node_id: str, device_files: str = "") -> None:
        """``device_files``: a template such as ``/srv/fake/gpu{index}`` naming character
        devices that stand in for /dev/nvidiaN (tests of the device fence); "" for none."""
        self._files = {i: device_files.format(index=i) for i in range(count) if device_files}
        prefix = node_id[:8]
        self._gpus = [
            Gpu(index=i, uuid=f"GPU-fake-{prefix}-{i}", model=model, memory_mib=0)
            for i in range(count)
        ]

    def read(self) -> list[Gpu]:
        return list(self._gpus)

    def device_ids(self, indices: list[int]) -> list[str]:
        return [str(index) for index in indices]

    def device_files(self) -> dict[int, str]:
        return dict(self._files)


class NvmlGpus:
    """The real GPUs. The inventory (UUID, model, memory) is read once at start, so a GPU that
    falls off the bus later is still reported, by the UUID it had."""

    fake = False

    def __init__(self) -> None:
        try:
            import pynvml  # only nodes with real GPUs have it working
        except ImportError as error:
            raise GpuDiscoveryError(f"pynvml is not installed ({error})") from error
        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._inventory = [self._describe(i) for i in range(count)]
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            minors = [pynvml.nvmlDeviceGetMinorNumber(handle) for handle in handles]
            self._files = {i: f"/dev/nvidia{minor}" for i, minor in enumerate(minors)}
        except pynvml.NVMLError as error:
            raise GpuDiscoveryError(f"NVML: {error}") from error
        self._xids: dict[str, int] = {}
        self._events = self._event_set()

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _describe(self, index: int) -> Gpu:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return Gpu(
            index=index,
            uuid=self._text(nvml.nvmlDeviceGetUUID(handle)),
            model=self._text(nvml.nvmlDeviceGetName(handle)),
            memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
        )

    def _event_set(self) -> Any:
        """An event set for critical Xids on every GPU that supports it (None: no Xids)."""
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            log.info("NVML event sets unavailable (%s): Xid errors are not watched", error)
            return None
        for gpu in self._inventory:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
            except nvml.NVMLError as error:
                log.info("GPU %d: Xid events not watched (%s)", gpu.index, error)
        return events

    def _drain_xids(self) -> None:
        nvml = self._nvml
        if self._events is None:
            return
        while True:
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing more pending (or nothing to read at all)
            xid = int(event.eventData)
            if xid in FATAL_XIDS:
                uuid = self._text(nvml.nvmlDeviceGetUUID(event.device))
                self._xids.setdefault(uuid, xid)
                log.error("GPU %s: Xid %d", uuid, xid)

    def read(self) -> list[Gpu]:
        self._drain_xids()
        return [self._read(gpu) for gpu in self._inventory]

    def _read(self, known: Gpu) -> Gpu:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(known.index)
            ecc = self._uncorrectable_ecc(handle)
            utilization, used = self._usage(handle)
        except nvml.NVMLError as error:
            if getattr(error, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
                reason = "fallen off the bus (NVML_ERROR_GPU_IS_LOST)"
            else:
                reason = f"NVML: {error}"
            return Gpu(known.index, known.uuid, known.model, known.memory_mib, False, reason)
        reason = ""
        if ecc > 0:
            reason = f"uncorrectable ECC errors: {ecc} (volatile)"
        elif known.uuid in self._xids:
            reason = f"Xid {self._xids[known.uuid]}"
        return Gpu(
            index=known.index,
            uuid=known.uuid,
            model=known.model,
            memory_mib=known.memory_mib,
            healthy=not reason,
            reason=reason,
            utilization_pct=float(utilization),
            memory_used_mib=used,
        )

    def _uncorrectable_ecc(self, handle: Any) -> int:
        nvml = self._nvml
        try:
            return int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
        except nvml.NVMLError as error:
            if getattr(error, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                return 0  # no ECC on this GPU (consumer cards)
            raise

    def _usage(self, handle: Any) -> tuple[float, int]:
        nvml = self._nvml
        try:
            utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
        except nvml.NVMLError as error:
            if getattr(error, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
                raise
            utilization = 0
        used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB
        return float(utilization), used

    def device_ids(self, indices: list[int]) -> list[str]:
        by_index = {gpu.index: gpu.uuid for gpu in self._inventory}
        return [by_index.get(index, str(index)) for index in indices]

    def device_files(self) -> dict[int, str]:
        return dict(self._files)  # /dev/nvidia<minor>: the minor is not always the index


def discover(
    *, fake_gpus: int | None, gpu_model: str, node_id: str, fake_device_files: str = ""
) -> Gpus:
    """The GPUs the agent reports and hands out; raises GpuDiscoveryError if it has none."""
    if fake_gpus is not None:
        return FakeGpus(fake_gpus, gpu_model, node_id, fake_device_files)
    try:
        return NvmlGpus()
    except GpuDiscoveryError as error:
        raise GpuDiscoveryError(
            f"no GPUs: {error}. Install the NVIDIA driver and nvidia-ml-py, "
            "or run with --fake-gpus N --gpu-model M (for development and tests)"
        ) from error
