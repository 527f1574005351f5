"""One correlation id finds a request's log lines, its Celery tasks' log lines (on a real
worker) and the events both appended."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import signals
from django.test import Client

from events.models import Event
from neocloud.core.correlation import correlation_bound, correlation_current
from neocloud.core.logs import formatter
from scheduler import events as ev
from scheduler.models import Workload, WorkloadStatus
from tenants.models import Role
from tests.builders import Builder, client_with_key
from tests.celery_worker import celery_worker, wait_until, worker_queue
from tests.logs import captured_log
from tests.scheduler.conftest import ready_fleet

REQUEST_ID = "req-7f3a-logs"
TOKEN = "nc_0a1b2c3d4e5f_Zebra-Quartz-locals"


def lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``text`` (a worker's log also holds its banner)."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """What the production handler writes, through the same formatter, into a buffer."""
    with captured_log("json") as buffer:
        yield buffer


@pytest.mark.smoke
@pytest.mark.django_db
def test_a_request_logs_under_the_id_it_was_sent_and_answers_with_it(
    client: Client, json_log: io.StringIO
) -> None:
    response = client.get("/healthz", HTTP_X_REQUEST_ID=REQUEST_ID)

    assert response["X-Request-ID"] == REQUEST_ID
    [line] = [line for line in lines(json_log.getvalue()) if line["event"] == "request"]
    assert line["correlation_id"] == REQUEST_ID
    assert (line["method"], line["path"], line["status"]) == ("GET", "/healthz", 200)
    assert line["level"] == "info"
    assert line["logger"] == "neocloud.requests"
    assert correlation_current() is None  # unbound after the request


@pytest.mark.smoke
@pytest.mark.django_db
@pytest.mark.parametrize("sent", [None, "", "two words", "x" * 200, "id\nforged: line"], ids=repr)
def test_a_missing_or_unfit_request_id_is_replaced_by_a_new_one(
    client: Client, json_log: io.StringIO, sent: str | None
) -> None:
    headers = {} if sent is None else {"X-Request-ID": sent}

    response = client.get("/healthz", headers=headers)

    given = response["X-Request-ID"]
    assert str(uuid.UUID(given)) == given  # a new one, not what was sent
    [line] = [line for line in lines(json_log.getvalue()) if line["event"] == "request"]
    assert line["correlation_id"] == given


@pytest.mark.smoke
def test_stdlib_log_lines_carry_the_bound_id(json_log: io.StringIO) -> None:
    with correlation_bound("c-1"):
        logging.getLogger("celery.worker").warning("lost %s", "heartbeat")
    logging.getLogger("celery.worker").warning("after")

    first, second = lines(json_log.getvalue())
    assert (first["event"], first["correlation_id"]) == ("lost heartbeat", "c-1")
    assert "correlation_id" not in second


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_id_finds_the_request_its_task_on_a_worker_and_their_events(
    build: Builder, tmp_path: Path, json_log: io.StringIO
) -> None:
    organization = build.organization("Acme")
    project = build.project(organization, "Training")
    ready_fleet(nodes=1)
    membership = build.member(organization, Role.MEMBER)
    _, secret = build.key(organization, membership.user)
    client = client_with_key(secret)
    fast = {"SIMULATED_STEP_DELAY_S": 0.01, "SCHEDULER_DEBOUNCE_S": 0.02, "LOG_FORMAT": "json"}

    with (
        worker_queue() as queue,
        celery_worker(queue=queue, log_dir=tmp_path, settings=fast) as worker,
    ):
        response = client.post(
            "/api/v1/workloads",
            {
                "project": str(project.pk),
                "name": "finetune",
                "gpu_models": ["h100"],
                "gpus_per_node": 1,
                "nodes": 1,
                "runtime_estimate_s": 3600,
            },
            format="json",
            HTTP_X_REQUEST_ID=REQUEST_ID,
        )
        assert response.status_code == 201, response.json()
        assert response["X-Request-ID"] == REQUEST_ID

        def granted() -> bool:
            return Workload.objects.filter(
                status__in=[
                    WorkloadStatus.SCHEDULED,
                    WorkloadStatus.PROVISIONING,
                    WorkloadStatus.RUNNING,
                ]
            ).exists()

        wait_until(granted, timeout=30, what=f"the grant; log:\n{worker.log()}")
        wait_until(
            lambda: any(line.get("correlation_id") == REQUEST_ID for line in lines(worker.log())),
            timeout=10,
            what=f"the task's log lines; log:\n{worker.log()}",
        )

    # The request's lines (in this process).
    request_lines = [line for line in lines(json_log.getvalue()) if line["event"] == "request"]
    assert [line["correlation_id"] for line in request_lines] == [REQUEST_ID]
    # The worker's lines of the task it sent: the task ran under the request's id.
    task_lines = [line for line in lines(worker.log()) if line.get("correlation_id") == REQUEST_ID]
    assert {line["task"] for line in task_lines} >= {"scheduler.schedule_cluster"}
    assert any("succeeded" in line["event"] for line in task_lines)
    # The events: the submission (the API's actor) and the grant (the worker's cycle).
    by_type = {
        e.type: e.metadata.get("correlation_id")
        for e in Event.objects.filter(
            type__in=[ev.WorkloadSubmitted.event_type, ev.AllocationGranted.event_type]
        )
    }
    assert by_type == {
        ev.WorkloadSubmitted.event_type: REQUEST_ID,
        ev.AllocationGranted.event_type: REQUEST_ID,
    }


def fails_holding(token: str) -> None:
    raise RuntimeError("lost the connection")


def traceback_logged(handler_formatter: logging.Formatter) -> str:
    """A failure logged with its traceback while a frame holds ``TOKEN``, as rendered."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(handler_formatter)
    logger = logging.getLogger("tests.tracebacks")
    logger.addHandler(handler)
    try:
        fails_holding(TOKEN)
    except RuntimeError:
        logger.exception("request failed")
    finally:
        logger.removeHandler(handler)
    return buffer.getvalue()


@pytest.mark.smoke
@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_traceback_names_its_frames_but_not_their_locals(fmt: str) -> None:
    text = traceback_logged(formatter(fmt))

    assert "fails_holding" in text
    assert "lost the connection" in text
    assert TOKEN not in text


@pytest.mark.smoke
def test_a_workers_logging_renders_tracebacks_without_locals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configured: list[dict[str, Any]] = []
    monkeypatch.setattr("logging.config.dictConfig", configured.append)

    signals.setup_logging.send(sender=None)  # what a worker or beat sends as it starts

    (config,) = configured
    spec = config["formatters"]["structlog"]
    made = spec["()"](**{name: value for name, value in spec.items() if name != "()"})
    text = traceback_logged(made)
    assert "fails_holding" in text
    assert TOKEN not in text
