"""The project's wiring: settings from the environment, the demo commands, the benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from events import store
from events.models import Stream
from events.runner import consumers_start, projection_consumers
from tenants.models import ApiKey, Organization
from tests.bench import bench_json
from tests.ledger.events import AccountClosed, AccountOpened

ROOT = Path(__file__).resolve().parent.parent


def _settings_in_fresh_process(env: dict[str, str]) -> dict[str, object]:
    script = (
        "import json, django; from django.conf import settings; django.setup();"
        "print(json.dumps({'engine': settings.DATABASES['default']['ENGINE'],"
        " 'name': str(settings.DATABASES['default']['NAME']),"
        " 'broker': settings.CELERY_BROKER_URL, 'eager': settings.CELERY_TASK_ALWAYS_EAGER,"
        " 'debug': settings.DEBUG}))"
    )
    clean = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**clean, "DJANGO_SETTINGS_MODULE": "neocloud.settings", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    settings: dict[str, object] = json.loads(result.stdout)
    return settings


@pytest.mark.smoke
def test_with_only_a_secret_key_the_embedded_default_runs(tmp_path: Path) -> None:
    settings = _settings_in_fresh_process({"NEOCLOUD_VAR_DIR": str(tmp_path), "SECRET_KEY": "s"})

    assert settings == {
        "engine": "django.db.backends.sqlite3",
        "name": str(tmp_path / "neocloud.sqlite3"),
        "broker": "memory://",
        "eager": True,
        "debug": False,
    }


def test_urls_switch_to_postgresql_and_redis() -> None:
    settings = _settings_in_fresh_process(
        {
            "DATABASE_URL": "postgres://u:p@db.example:5433/neo",
            "REDIS_URL": "redis://cache.example:6380/2",
            "SECRET_KEY": "s",
            "STRIPE_API_KEY": "sk_test_x",
            "STRIPE_WEBHOOK_SECRET": "whsec_x",
            "SECRETS_KEYS": "c2VjcmV0cy1rZXktb2YtdGhlLXByb2R1Y3Rpb24tZQ==",
        }
    )

    assert settings == {
        "engine": "django.db.backends.postgresql",
        "name": "neo",
        "broker": "redis://cache.example:6380/2",
        "eager": False,
        "debug": False,
    }


def test_production_without_a_secret_key_refuses_to_start() -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _settings_in_fresh_process({"DATABASE_URL": "postgres://u@h/db", "SECRET_KEY": ""})

    assert "SECRET_KEY must be set" in failed.value.stderr


@pytest.mark.django_db
def test_demo_setup_refuses_outside_the_demo(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEMO = False

    with pytest.raises(CommandError, match="NEOCLOUD_DEMO=1"):
        call_command("demo_setup")


@pytest.mark.smoke
@pytest.mark.django_db
def test_demo_setup_creates_the_operator_and_a_customer_once(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.DEMO = True
    settings.VAR_DIR = tmp_path
    from django.contrib.auth import get_user_model

    call_command("demo_setup")
    call_command("demo_setup")

    operator = get_user_model().objects.get(email="admin@neocloud.local")
    assert operator.is_superuser
    assert operator.check_password("admin")
    assert Organization.objects.filter(slug="demo-lab").count() == 1
    assert ApiKey.objects.filter(organization__slug="demo-lab").count() == 1


@pytest.mark.smoke
@pytest.mark.django_db
def test_demo_setup_prices_every_gpu_model_of_its_fleet_and_keeps_an_operators_price(  # type: ignore[no-untyped-def]
    settings, tmp_path
) -> None:
    """So the what-if answers with a price per hour, and the demo's usage can be invoiced."""
    settings.DEMO = True
    settings.VAR_DIR = tmp_path
    from billing.models import DefaultGpuPrice
    from inventory.models import Node

    call_command("demo_setup")
    DefaultGpuPrice.objects.filter(gpu_model="l4-24gb").update(price_per_gpu_hour_minor=7)
    call_command("demo_setup")

    priced = {p.gpu_model: p for p in DefaultGpuPrice.objects.filter(price_plan="on_demand")}
    fleet = set(Node.objects.exclude(gpu_model=None).values_list("gpu_model__slug", flat=True))
    assert fleet
    assert fleet <= set(priced)
    assert all(p.price_per_gpu_hour_minor > 0 and p.currency == "USD" for p in priced.values())
    assert priced["l4-24gb"].price_per_gpu_hour_minor == 7  # set again by nobody


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_consumer_threads_keep_asynchronous_projections_current() -> None:
    stop = threading.Event()
    threads = consumers_start(projection_consumers(), stop)
    try:
        store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
        deadline = time.monotonic() + 30
        while not Stream.objects.filter(stream_id="a1").exists():
            assert time.monotonic() < deadline, "the stream-heads consumer never caught up"
            time.sleep(0.02)
    finally:
        stop.set()
        store.append("account", "a1", [AccountClosed(reason="wake")], expected_version=1)
        for thread in threads:
            thread.join(30)

    assert Stream.objects.get(stream_id="a1").version >= 1
    assert not any(t.is_alive() for t in threads)


@pytest.mark.postgres
def test_the_eventstore_benchmark_prints_its_figures_as_json() -> None:
    figures = bench_json("eventstore", scale=0.005)

    assert figures["suite"] == "eventstore"
    assert set(figures["ratios"]) == {
        "append_vs_baseline",
        "append_batch1_vs_baseline",
        "append_vs_eventsourcing",
        "append_batch1_vs_eventsourcing",
    }
    assert figures["figures"]["catchup_events"] >= 1000
    assert figures["figures"]["replay_events"] == figures["log_events"]
    assert figures["peak_rss_mb"] > 0


@pytest.mark.smoke
@pytest.mark.django_db(transaction=True)
def test_demo_job_is_scheduled_runs_and_succeeds_on_the_embedded_default(  # type: ignore[no-untyped-def]
    settings, tmp_path
) -> None:
    """What the demo tour shows: a job submitted with the demo key runs on the demo fleet
    and finishes, with tasks and cycles in process."""
    from neocloud.celery import app as celery_app
    from scheduler import scheduling, tasks
    from tests.builders import client_with_key

    settings.DEMO = True
    settings.VAR_DIR = tmp_path
    settings.SIMULATED_STEP_DELAY_S = 0
    saved = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    scheduling.forget()
    try:
        call_command("demo_setup")
        client = client_with_key((tmp_path / "demo-api-key.txt").read_text().strip())
        project = client.get("/api/v1/projects").json()["results"][0]["id"]
        response = client.post(
            "/api/v1/workloads",
            {
                "project": project,
                "name": "hello-gpu",
                "gpu_models": ["h100-sxm5-80gb"],
                "gpus_per_node": 2,
                "runtime_estimate_s": 0.2,
            },
            format="json",
        )
        assert response.status_code == 201, response.json()
        url = f"/api/v1/workloads/{response.json()['id']}"
        assert client.get(url).json()["status"] == "running"
        time.sleep(0.3)
        tasks.tick()
        assert client.get(url).json()["status"] == "succeeded"
    finally:
        celery_app.conf.task_always_eager = saved
        scheduling.forget()
