"""The simulated driver: the provisioning steps without a data centre, with the delays and the
faults of one.

Every step records its effect in ``SimulatedEffect`` under the step's idempotency key, the
way a cloud API keeps client tokens: a second call with a known key returns the stored
result at once and does nothing else. The effect row commits in its own transaction before
the call returns, so an effect survives the worker that made it.

Settings (read at each call with ``getattr``, so tests may override them):

``SIMULATED_STEP_DELAY_S``
    Seconds each step takes (default 0.05): a number, or a dict of step name to seconds
    whose ``"default"`` key covers the other steps, e.g. ``{"default": 0.05,
    "verify_gpus": 2.0}``.
``SIMULATED_FAULTS``
    Faults to inject, by step name (default none), e.g.
    ``{"install_gpu_drivers": {"fail": 0.5}, "connect_network": {"hang": 1.0,
    "first_attempts": 1}, "attach_storage": {"crash": 1.0}}``. Each kind has a probability:

    - ``fail``: raise ``StepFailed`` before any effect (retryable, unless the fault also
      says ``"retryable": false``);
    - ``hang``: sleep ``SIMULATED_HANG_S`` before any effect, far beyond the step's time
      limit, so that the task's timeout has to interrupt it;
    - ``crash``: SIGKILL the current process right after the effect is committed and before
      the step returns: the worst moment, since the effect exists and nobody knows it.

    ``first_attempts: N`` limits the faults of a step to its first N attempts.
``SIMULATED_SEED``
    Seed of the fault draws (default 0). A draw depends only on (seed, idempotency key,
    attempt, fault kind), so a run is reproducible, and the same step can fail on attempt 1
    and succeed on attempt 2.
``SIMULATED_HANG_S``
    How long a hang lasts (default 3600 s).

The attempt number comes from ``inventory.drivers.base.step_attempt``, set by the step
runner around the call; a call made without it (a test calling the driver directly) counts
the calls per key in this process instead.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction

from inventory.drivers.base import (
    NodeSpec,
    ProvisioningDriver,
    RunOutcome,
    RunState,
    StepDetails,
    StepFailed,
    WorkloadRun,
    step_attempt,
)
from inventory.models import SimulatedEffect

DEFAULT_STEP_DELAY_S = 0.05
DEFAULT_HANG_S = 3600.0

# Attempts of calls made outside the step runner, per idempotency key (this process only).
_calls_without_runner: Counter[str] = Counter()


@dataclass(frozen=True)
class Fault:
    """The faults configured for one step (``SIMULATED_FAULTS``)."""

    fail: float = 0.0
    hang: float = 0.0
    crash: float = 0.0
    retryable: bool = True
    first_attempts: int | None = None  # None: every attempt may fault

    @classmethod
    def parse(cls, step: str, spec: Mapping[str, Any]) -> Fault:
        unknown = set(spec) - {"fail", "hang", "crash", "retryable", "first_attempts"}
        if unknown:
            raise ValueError(f"SIMULATED_FAULTS[{step!r}]: unknown keys {sorted(unknown)}")
        first = spec.get("first_attempts")
        return cls(
            fail=float(spec.get("fail", 0.0)),
            hang=float(spec.get("hang", 0.0)),
            crash=float(spec.get("crash", 0.0)),
            retryable=bool(spec.get("retryable", True)),
            first_attempts=None if first is None else int(first),
        )

    def strikes(self, kind: str, *, seed: int, key: str, attempt: int) -> bool:
        """Whether the fault ``kind`` hits this attempt of the step with key ``key``."""
        probability: float = getattr(self, kind)
        if probability <= 0 or (self.first_attempts is not None and attempt > self.first_attempts):
            return False
        return fault_draw(seed=seed, key=key, attempt=attempt, kind=kind) < probability


def fault_draw(*, seed: int, key: str, attempt: int, kind: str) -> float:
    """A number in [0, 1) that depends only on its arguments (not on the process or the
    order of calls), so that a fault strikes the same attempt in every run."""
    # A simulation's dice, not a secret: the standard generator is what we want.
    return random.Random(f"{seed}:{key}:{attempt}:{kind}").random()  # noqa: S311


class SimulatedDriver(ProvisioningDriver):
    """Provisioning against nothing, with configurable delays and injected faults."""

    name = "simulated"

    # --- provision ---------------------------------------------------------------------------

    def allocate_server(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "allocate_server",
            node.node_id,
            idempotency_key,
            lambda: {
                "server_id": f"srv-{_digest(idempotency_key, 12)}",
                "ip": _address(idempotency_key),
                "hostname": f"{node.name}.{node.cluster}.internal",
            },
        )

    def install_gpu_drivers(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "install_gpu_drivers",
            node.node_id,
            idempotency_key,
            lambda: {"driver_version": "550.54.15", "cuda_version": "12.4"},
        )

    def verify_gpus(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "verify_gpus",
            node.node_id,
            idempotency_key,
            lambda: {
                "gpu_model": node.gpu_model,
                "gpus_found": node.gpu_count,
                "gpus_healthy": node.gpu_count,
            },
        )

    def connect_network(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "connect_network",
            node.node_id,
            idempotency_key,
            lambda: {
                "port_id": f"port-{_digest(idempotency_key, 12)}",
                "vlan": 100 + int(_digest(idempotency_key, 4), 16) % 3900,
                "fabric_ip": _address(idempotency_key + ":fabric", network="172.16.0.0/12"),
            },
        )

    def attach_storage(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "attach_storage",
            node.node_id,
            idempotency_key,
            lambda: {
                "volume_id": f"vol-{_digest(idempotency_key, 12)}",
                "size_gib": 2048,
                "mount_path": "/mnt/scratch",
            },
        )

    def create_credentials(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        # Only the public half is a result worth recording; the simulation has no secret.
        return self._perform(
            "create_credentials",
            node.node_id,
            idempotency_key,
            lambda: {
                "ssh_user": "neocloud",
                "credential_id": f"cred-{_digest(idempotency_key, 12)}",
                "public_key_fingerprint": f"SHA256:{_digest(idempotency_key + ':key', 43)}",
            },
        )

    # --- teardown ----------------------------------------------------------------------------

    def revoke_credentials(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._undo(
            "revoke_credentials", "create_credentials", "credential_id", node, idempotency_key
        )

    def detach_storage(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._undo("detach_storage", "attach_storage", "volume_id", node, idempotency_key)

    def disconnect_network(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._undo("disconnect_network", "connect_network", "port_id", node, idempotency_key)

    def release_server(self, node: NodeSpec, *, idempotency_key: str) -> StepDetails:
        return self._undo("release_server", "allocate_server", "server_id", node, idempotency_key)

    # --- workloads ---------------------------------------------------------------------------

    def workload_start(self, run: WorkloadRun, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "workload_start",
            run.node_ids[0],
            idempotency_key,
            lambda: {"container_id": f"ctr-{_digest(idempotency_key, 12)}"},
        )

    def workload_poll(self, run: WorkloadRun, *, started_at: float, now: float) -> RunState:
        """A job ends after its runtime: it fails there with the ``workload_run`` fault's
        ``fail`` probability (drawn per allocation), else succeeds. A service runs on."""
        if run.runtime_s is None or now < started_at + run.runtime_s:
            return RunState(RunOutcome.RUNNING)
        fault = _faults().get("workload_run", Fault())
        seed = int(getattr(settings, "SIMULATED_SEED", 0))
        if fault.strikes("fail", seed=seed, key=str(run.allocation_id), attempt=1):
            return RunState(RunOutcome.FAILED, "simulated failure of the workload")
        return RunState(RunOutcome.SUCCEEDED, "exited 0")

    def workload_stop(self, run: WorkloadRun, *, idempotency_key: str) -> StepDetails:
        return self._perform(
            "workload_stop", run.node_ids[0], idempotency_key, lambda: {"stopped": True}
        )

    # --- the simulation ----------------------------------------------------------------------

    def _undo(
        self, step: str, undoes: str, field: str, node: NodeSpec, idempotency_key: str
    ) -> StepDetails:
        """A teardown step names what it removed: the latest effect of the step it undoes
        (None when that step never ran)."""

        def result() -> StepDetails:
            done = (
                SimulatedEffect.objects.filter(node_id=node.node_id, step=undoes)
                .order_by("-id")
                .first()
            )
            return {field: done.result.get(field) if done else None, "removed": done is not None}

        return self._perform(step, node.node_id, idempotency_key, result)

    def _perform(
        self,
        step: str,
        node_id: UUID,
        idempotency_key: str,
        result: Callable[[], StepDetails],
    ) -> StepDetails:
        known = SimulatedEffect.objects.filter(idempotency_key=idempotency_key).first()
        if known is not None:
            return dict(known.result)

        attempt = _attempt(idempotency_key)
        seed = int(getattr(settings, "SIMULATED_SEED", 0))
        fault = _faults().get(step, Fault())

        def strikes(kind: str) -> bool:
            return fault.strikes(kind, seed=seed, key=idempotency_key, attempt=attempt)

        time.sleep(_delay(step))
        if strikes("fail"):
            raise StepFailed(
                f"simulated failure of {step} (attempt {attempt})", retryable=fault.retryable
            )
        if strikes("hang"):
            _hang()
        # Durable: the effect commits here, never with a caller's transaction, so that it
        # outlives a crash of the caller (the runner never calls a driver inside one).
        with transaction.atomic(durable=True):
            effect, _ = SimulatedEffect.objects.get_or_create(
                idempotency_key=idempotency_key,
                defaults={"node_id": node_id, "step": step, "result": result()},
            )
        if strikes("crash"):
            _crash()
        return dict(effect.result)


def _hang() -> None:
    time.sleep(float(getattr(settings, "SIMULATED_HANG_S", DEFAULT_HANG_S)))


def _crash() -> None:
    """Die the way a worker dies to the OOM killer or a power cut: no cleanup at all."""
    os.kill(os.getpid(), signal.SIGKILL)


def _attempt(idempotency_key: str) -> int:
    attempt = step_attempt.get(None)
    if attempt is None:
        _calls_without_runner[idempotency_key] += 1
        attempt = _calls_without_runner[idempotency_key]
    return attempt


def _faults() -> dict[str, Fault]:
    configured: Mapping[str, Mapping[str, Any]] = getattr(settings, "SIMULATED_FAULTS", None) or {}
    return {step: Fault.parse(step, spec) for step, spec in configured.items()}


def _delay(step: str) -> float:
    configured = getattr(settings, "SIMULATED_STEP_DELAY_S", DEFAULT_STEP_DELAY_S)
    if isinstance(configured, Mapping):
        return float(configured.get(step, configured.get("default", DEFAULT_STEP_DELAY_S)))
    return float(configured)


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _address(text: str, network: str = "10.0.0.0/8") -> str:
    """A stable address of ``network`` for ``text`` (never the network or broadcast one)."""
    net = ipaddress.ip_network(network)
    offset = 1 + int(_digest(text, 8), 16) % (net.num_addresses - 2)
    return str(net.network_address + offset)
