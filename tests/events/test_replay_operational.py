"""Operational columns the log does not hold (heartbeat times, keys' last use) survive a
replay: a rebuild must not make healthy nodes look silent, nor used keys unused."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command

from inventory import services as inventory
from inventory.lifecycle import NodeState
from inventory.models import Node
from tenants.models import ApiKey
from tests.builders import Builder, client_with_key, run
from tests.builders.fleet import OPERATOR, cluster, node, put_in_state

pytestmark = pytest.mark.django_db


def test_a_replay_keeps_every_nodes_last_heartbeat() -> None:
    fra1 = cluster()
    heard, _ = node(fra1, "n1")
    silent, _ = node(fra1, "n2")
    heard = put_in_state(heard, NodeState.READY)
    put_in_state(silent, NodeState.READY)
    run(inventory.node_heartbeat, actor=OPERATOR, node=heard, gpus=[])
    seen = Node.objects.get(pk=heard.pk).last_heartbeat_at
    assert seen is not None

    call_command("replay", "inventory.fleet", verbosity=0)

    assert dict(Node.objects.values_list("name", "last_heartbeat_at")) == {"n1": seen, "n2": None}
    failed = inventory.heartbeats_check(
        actor=OPERATOR, threshold=timedelta(seconds=90), now=seen + timedelta(seconds=30)
    )
    assert failed == []


def test_a_replay_keeps_every_keys_last_use(build: Builder) -> None:
    owner = build.user("owner@acme.example")
    acme = build.organization("Acme", owner=owner)
    used, secret = build.key(acme, owner)
    unused, _ = build.key(acme, owner)
    assert client_with_key(secret).get("/api/v1/me").status_code == 200
    last_used = ApiKey.objects.get(pk=used.pk).last_used_at
    assert last_used is not None

    call_command("replay", "tenants.tenancy", verbosity=0)

    assert dict(ApiKey.objects.values_list("pk", "last_used_at")) == {
        used.pk: last_used,
        unused.pk: None,
    }
