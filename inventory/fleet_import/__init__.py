"""Importing a fleet: a YAML description, or the node list of the Alibaba GPU trace.

Two stages. ``fleet_parse`` / ``alibaba_nodes_parse`` check the untrusted file (pydantic
models: ``fleet_file``, ``alibaba``) and turn it into plain frozen values (``spec``),
collecting every problem with its path in the file (``problems``); ``fleet_import`` then
checks the file against the fleet as it is (``plan``) and applies it through the services
(``gpu_model_define``, ``region_define``, ``cluster_define``, ``rack_define``,
``node_register``), all in one transaction: bad input writes nothing (``apply``).

The YAML format is described in ``fleet_file``; ``examples/fleet.yaml`` is a complete
example. Importing is idempotent, and nothing is ever removed.
"""

from inventory.fleet_import.alibaba import (
    ALIBABA_GPU_MODELS,
    ALIBABA_RACK_SIZE,
    alibaba_nodes_parse,
)
from inventory.fleet_import.apply import ImportSummary, Tally, fleet_import
from inventory.fleet_import.fleet_file import fleet_parse, fleet_parse_yaml
from inventory.fleet_import.problems import FleetInvalid
from inventory.fleet_import.spec import (
    ClusterSpec,
    FleetSpec,
    GpuModelSpec,
    NodeSpec,
    RackSpec,
    RegionSpec,
)

__all__ = [
    "ALIBABA_GPU_MODELS",
    "ALIBABA_RACK_SIZE",
    "ClusterSpec",
    "FleetInvalid",
    "FleetSpec",
    "GpuModelSpec",
    "ImportSummary",
    "NodeSpec",
    "RackSpec",
    "RegionSpec",
    "Tally",
    "alibaba_nodes_parse",
    "fleet_import",
    "fleet_parse",
    "fleet_parse_yaml",
]
