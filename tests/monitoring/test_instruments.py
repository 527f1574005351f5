"""The metrics a process measures itself: a scheduling cycle, provisioning steps, Celery tasks;
and the multiprocess mode that sums them over a host's processes."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import transaction

from inventory import services as inventory
from scheduler import services, tasks
from tests.builders import run
from tests.builders.fleet import cluster, node
from tests.celery_worker import worker_database_url
from tests.monitoring.conftest import metric_value as _value
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[2]


def test_a_cycle_that_grants_is_timed_and_its_decisions_counted(
    tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1)
    cluster_id = str(fleet.cluster.pk)
    cycles = _value("neocloud_scheduling_cycle_duration_seconds_count", cluster_id=cluster_id)
    granted = _value(
        "neocloud_scheduling_decisions_total", cluster_id=cluster_id, decision="granted"
    )

    run(services.workload_submit, project=tenant.project, spec=job("timed", runtime_estimate_s=60))

    after = _value("neocloud_scheduling_cycle_duration_seconds_count", cluster_id=cluster_id)
    assert after >= cycles + 1
    assert (
        _value("neocloud_scheduling_decisions_total", cluster_id=cluster_id, decision="granted")
        == granted + 1
    )


def test_each_provisioning_step_is_timed(in_process: None, settings: object) -> None:
    settings.SIMULATED_STEP_DELAY_S = 0  # type: ignore[attr-defined]
    with transaction.atomic():
        registered, _ = node(cluster("ams1"), name="p1")
    before = _value(
        "neocloud_provisioning_step_duration_seconds_count", step="verify_gpus", status="succeeded"
    )

    run(inventory.node_provision, node=registered)

    assert (
        _value(
            "neocloud_provisioning_step_duration_seconds_count",
            step="verify_gpus",
            status="succeeded",
        )
        == before + 1
    )


def test_celery_task_outcomes_are_counted(in_process: None) -> None:
    before = _value("neocloud_celery_tasks_total", task="scheduler.tick", outcome="succeeded")

    tasks.tick.apply()

    after = _value("neocloud_celery_tasks_total", task="scheduler.tick", outcome="succeeded")
    assert after == before + 1


COUNT_ONE = (
    "import django; django.setup();"
    "from monitoring import instruments;"
    "instruments.celery_tasks.labels(task='t', outcome='succeeded').inc()"
)
SCRAPE = (
    "import django; django.setup();"
    "from prometheus_client import generate_latest; from monitoring import views;"
    "print(generate_latest(views._registry()).decode())"
)


def test_multiprocess_mode_sums_the_hosts_processes_and_keeps_a_dead_ones_totals(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": worker_database_url(),  # the scrape also reads the database's gauges
    }
    for _ in range(2):  # two worker processes, each gone once it counted
        subprocess.run([sys.executable, "-c", COUNT_ONE], env=env, cwd=ROOT, check=True)
    scrape = [sys.executable, "-c", SCRAPE]
    scraped = subprocess.run(scrape, env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    assert 'neocloud_celery_tasks_total{outcome="succeeded",task="t"} 2.0' in scraped.stdout


def test_gunicorns_config_drops_a_dead_workers_live_gauges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    live = tmp_path / "gauge_livesum_4242.db"
    live.write_bytes(b"")
    total = tmp_path / "counter_4242.db"
    total.write_bytes(b"")
    config = runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))

    config["child_exit"](None, SimpleNamespace(pid=4242))

    assert not live.exists()
    assert total.exists()  # its totals stay in the sums
