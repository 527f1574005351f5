"""Provisioning drivers: a node's own (``Node.driver``, from the fleet file), else the
``PROVISIONING_DRIVER`` setting (``simulated`` by default). ``agent`` runs work for real
through node agents; a Kubernetes or bare-metal driver implements the same interface."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from inventory.drivers.base import (
    PROVISION_STEPS,
    TEARDOWN_STEPS,
    NodeSpec,
    ProvisioningDriver,
    RunOutcome,
    RunState,
    StepFailed,
    WorkloadRun,
)

DRIVERS = {
    "simulated": "inventory.drivers.simulated.SimulatedDriver",
    "agent": "execution.driver.AgentDriver",  # above the fleet: named, not imported
}


def driver(name: str = "") -> ProvisioningDriver:
    """The driver called ``name`` (a node's own), else the deployment's."""
    return _driver_class(name)()


def runs_programs(name: str = "") -> bool:
    """Whether the driver called ``name`` (else the deployment's) runs workloads' programs."""
    return _driver_class(name).runs_programs


def _driver_class(name: str) -> type[ProvisioningDriver]:
    name = name or settings.PROVISIONING_DRIVER
    driver_class: type[ProvisioningDriver] = import_string(DRIVERS.get(name, name))
    return driver_class


__all__ = [
    "PROVISION_STEPS",
    "TEARDOWN_STEPS",
    "NodeSpec",
    "ProvisioningDriver",
    "RunOutcome",
    "RunState",
    "StepFailed",
    "WorkloadRun",
    "driver",
    "runs_programs",
]
