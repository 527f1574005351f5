"""The workload admin shows what a workload runs and how much of its GPUs it uses, read-only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from inventory import services as inventory
from inventory.lifecycle import NodeState
from tenants.models import User
from tests.builders import Builder, run
from tests.builders.fleet import cluster, node, put_in_state
from tests.builders.history import SchedulingLog

pytestmark = pytest.mark.django_db

PROGRAM = {
    "command": ["python", "serve.py", "--port", "8000"],
    "image": "ghcr.io/acme/serve:1.2",
    "env": {"MODE": "prod"},
    "secrets": ["HF_TOKEN"],
    "working_dir": "/srv/app",
    "ports": [8000],
}


def test_the_change_page_shows_program_endpoints_and_utilisation(build: Builder) -> None:
    fleet = cluster()
    target = put_in_state(node(fleet, "n0", gpus=2)[0], NodeState.READY)
    log = SchedulingLog(project=build.project(build.organization("Acme")), cluster_id=fleet.pk)
    start = timezone.now() - timedelta(hours=1)
    workload = log.submit(start, kind="service", program=PROGRAM)
    log.running(workload, log.grant(workload, start, [(2, 1000)], nodes=[target.pk]), start)
    run(
        inventory.node_heartbeat,
        node=target,
        gpus=[inventory.GpuHealth(index=i, healthy=True, utilization_pct=25.0) for i in (0, 1)],
    )
    admin = Client()
    admin.force_login(User.objects.create_superuser("root@neocloud.example", "pw"))

    page = admin.get(f"/admin/scheduler/workload/{workload}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    for shown in ("serve.py", "ghcr.io/acme/serve:1.2", "MODE", "HF_TOKEN", "/srv/app"):
        assert shown in text
    assert "2 GPUs, 25.0% mean" in text
    assert 'name="_save"' not in text
