"""What an agent gets to mount: each volume of the run with its type, the host directory of a
shared one (the cluster's shared path and the volume's id), its path in the run and whether
it is read-only. A local volume's directory is the agent's to choose ("")."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import Settings

from scheduler.specs import VolumeMount
from storage import services as storage
from tests.builders import run
from tests.execution.conftest import Agent, Customer, acme, agent_driver, agents_of, submit
from tests.scheduler.conftest import ready_fleet
from tests.storage.conftest import disk

__all__ = ["acme", "agent_driver"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_the_assignment_lists_the_runs_volumes(
    settings: Settings, agent_driver: None, acme: Customer
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    settings.VOLUME_SHARED_PATHS = {fleet.cluster.slug: "/srv/shared"}
    disk(fleet.nodes[0], 500)
    local, shared = (
        run(
            storage.volume_create,
            project=acme.project,
            name=kind,
            size_gb=10,
            cluster=fleet.cluster.slug,
            type=kind,
        )
        for kind in ("local", "shared")
    )
    (agent,) = agents_of(fleet)
    mounts = (
        VolumeMount(volume=local.pk, path="/mnt/data"),
        VolumeMount(volume=shared.pk, path="/mnt/team/set", read_only=True),
    )

    submit(acme, gpus=1, volumes=mounts)

    assert _listed_volumes(agent) == [
        {"id": str(local.pk), "type": "local", "host_path": "", "path": "/mnt/data",
         "read_only": False},
        {"id": str(shared.pk), "type": "shared", "host_path": f"/srv/shared/{shared.pk}",
         "path": "/mnt/team/set", "read_only": True},
    ]  # fmt: skip


def test_a_run_without_volumes_lists_none(agent_driver: None, acme: Customer) -> None:
    (agent,) = agents_of(ready_fleet(nodes=1, gpus=8))

    submit(acme, gpus=1)

    assert _listed_volumes(agent) == []


def _listed_volumes(agent: Agent) -> list[dict[str, object]]:
    volumes: list[dict[str, object]] = agent.only()["volumes"]
    return volumes
