"""Provisioning drivers, chosen by the ``PROVISIONING_DRIVER`` setting (``simulated`` by
default; ``agent``: existing servers whose node agent runs the work; a Kubernetes or
bare-metal driver implements the same interface). Named by import string: the fleet does not
import the apps that drive it."""

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
    "agent": "execution.driver.AgentDriver",
}


def driver() -> ProvisioningDriver:
    path = DRIVERS.get(settings.PROVISIONING_DRIVER, settings.PROVISIONING_DRIVER)
    driver_class: type[ProvisioningDriver] = import_string(path)
    return driver_class()


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
]
