"""A real driver returns credentials with a step's details (a root password, a private key, a
BMC token). The permanent log keeps the details but never the secrets: they are scrubbed
before they are recorded, at any depth."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from pytest_django.fixtures import Settings

from inventory import events as ev
from inventory import services
from inventory.drivers import NodeSpec
from inventory.drivers.simulated import SimulatedDriver
from inventory.lifecycle import NodeState
from inventory.models import Node, ProvisioningStep
from neocloud.core.redaction import REDACTED
from tests.builders import run
from tests.inventory.conftest import Fleet, provisioning_events

pytestmark = [
    pytest.mark.django_db(transaction=True),  # real commits: steps dispatch each other on commit
    pytest.mark.usefixtures("eager_tasks"),
]

SECRETS = ("hunter2-root", "-----BEGIN OPENSSH PRIVATE KEY-----xyz", "bmc-tok-123", "s3cr3t")


class LeakyDriver(SimulatedDriver):
    """The simulated driver, answering like a real one that hands back credentials."""

    def allocate_server(self, node: NodeSpec, *, idempotency_key: str) -> dict[str, Any]:
        details = super().allocate_server(node, idempotency_key=idempotency_key)
        return details | {"bmc": {"address": "10.0.0.9", "token": SECRETS[2]}}

    def create_credentials(self, node: NodeSpec, *, idempotency_key: str) -> dict[str, Any]:
        details = super().create_credentials(node, idempotency_key=idempotency_key)
        return details | {
            "root_password": SECRETS[0],
            "keys": [{"name": "ops", "private_key": SECRETS[1]}],
            "credentials": {"user": "neocloud", "secret": SECRETS[3]},
        }


@pytest.fixture(autouse=True)
def _leaky(settings: Settings) -> None:
    settings.SIMULATED_STEP_DELAY_S = 0
    settings.SIMULATED_FAULTS = {}
    settings.PROVISIONING_DRIVER = f"{__name__}.LeakyDriver"


def test_a_drivers_secrets_never_reach_the_log(fleet: Fleet) -> None:
    node = fleet.node()

    run(services.node_provision, node=node)

    assert Node.objects.get(pk=node.pk).state == NodeState.READY
    with connection.cursor() as cursor:
        cursor.execute("SELECT data::text FROM events_event")
        raw = " ".join(row[0] for row in cursor.fetchall())
    assert [secret for secret in SECRETS if secret in raw] == []
    succeeded = {
        e["step"]: e["details"] for e in provisioning_events(node, ev.ProvisioningStepSucceeded)
    }
    # The rest of the details stays: what an operator needs to find the server and the key.
    assert succeeded["allocate_server"]["bmc"] == {"address": "10.0.0.9", "token": REDACTED}
    credentials = succeeded["create_credentials"]
    assert credentials["ssh_user"] == "neocloud"
    assert credentials["credential_id"].startswith("cred-")
    assert (credentials["root_password"], credentials["credentials"]) == (REDACTED, REDACTED)
    assert credentials["keys"] == [{"name": "ops", "private_key": REDACTED}]
    projected = ProvisioningStep.objects.get(node=node, step="create_credentials").details
    assert projected == credentials
