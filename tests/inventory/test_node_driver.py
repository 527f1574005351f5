"""A node's own provisioning driver: named in the fleet file, recorded in the log, used for its
provisioning steps and its runs (else the deployment's ``PROVISIONING_DRIVER``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.core.management import CommandError
from django.test import override_settings

from events import store
from inventory import drivers
from inventory.drivers.simulated import SimulatedDriver
from inventory.models import Node
from scheduler import runs
from scheduler.models import Allocation
from tests.inventory.test_import_fleet import example, import_fleet, rack_nodes, write

pytestmark = pytest.mark.django_db


def _with_driver(tmp_path: Path, driver: str) -> str:
    data = example()
    for entry in rack_nodes(data, 0):
        entry["driver"] = driver
    return write(tmp_path, data)


def test_the_fleet_file_gives_nodes_their_driver_and_a_change_is_recorded(tmp_path: Path) -> None:
    import_fleet(write(tmp_path, example()))
    assert set(Node.objects.values_list("driver", flat=True)) == {""}
    head = store.head_position()
    import_fleet(_with_driver(tmp_path, "agent"))
    changed = [e for e in store.read_all(after=head) if e.type == "inventory.NodeRespecified"]
    assert changed
    assert all(e.data["driver"] == "agent" for e in changed)
    first_rack = example()["regions"][0]["clusters"][0]["racks"][0]["name"]
    in_rack = set(Node.objects.filter(rack__name=first_rack).values_list("name", flat=True))
    agent_nodes = set(Node.objects.filter(driver="agent").values_list("name", flat=True))
    assert agent_nodes == in_rack
    assert in_rack
    assert Node.objects.exclude(driver="agent").exists()  # the other racks keep the default


def test_an_unknown_driver_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="driver"):
        import_fleet(_with_driver(tmp_path, "kubernetes-someday"))
    assert not Node.objects.exists()


def test_a_node_without_a_driver_uses_the_deployments_and_one_with_uses_its_own(
    tmp_path: Path,
) -> None:
    import_fleet(_with_driver(tmp_path, "simulated"))
    own = Node.objects.filter(driver="simulated").first()
    default = Node.objects.filter(driver="").first()
    assert own is not None
    assert default is not None
    with override_settings(PROVISIONING_DRIVER="inventory.drivers.simulated.SimulatedDriver"):
        assert isinstance(drivers.driver(own.driver), SimulatedDriver)
        assert isinstance(drivers.driver(default.driver), SimulatedDriver)
    with override_settings(PROVISIONING_DRIVER="no.such.Driver"), pytest.raises(ImportError):
        drivers.driver(default.driver)  # the deployment's, which does not exist here
    gang = Allocation(
        id=uuid.uuid4(), placements=[{"node_id": str(own.pk)}, {"node_id": str(default.pk)}]
    )
    alone = Allocation(id=uuid.uuid4(), placements=[{"node_id": str(default.pk)}])
    assert runs._drivers_of((gang, alone)) == {gang.pk: "simulated", alone.pk: ""}
