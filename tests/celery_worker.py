"""A real Celery worker for tests: ``celery -A neocloud worker`` in a subprocess, on the test
database, with a queue of its own, that a test can kill like an operator's ``kill -9``.

Use it from a ``django_db(transaction=True)`` test (the worker only sees committed rows)::

    with worker_queue() as queue, celery_worker(queue=queue, log_dir=tmp_path) as worker:
        ...  # whatever the test enqueues goes to ``queue``; the worker consumes only it
        worker.kill()  # SIGKILL to its whole process group: main process and pool children

Settings reach the worker as environment variables named like the settings
(``celery_worker(settings={"SIMULATED_FAULTS": {...}})``; dicts and lists as JSON), which
``neocloud.settings`` reads. The broker's visibility timeout is short
(``CELERY_VISIBILITY_TIMEOUT_S``, 5 s by default here), so that the message of a killed
worker comes back to the next one within seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from neocloud.celery import app as celery_app

PROJECT_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 60.0
VISIBILITY_TIMEOUT_S = 5


def redis_url() -> str:
    """The broker the suite runs against; the test is skipped without one."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        pytest.skip("needs a real broker: REDIS_URL is not set (make test sets it)")
    return url


def worker_database_url() -> str:
    """A URL of the database pytest-django created for this run (not the configured one)."""
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.skip("a worker process needs PostgreSQL: it cannot share an in-memory database")
    user = quote(db.get("USER") or "", safe="")
    password = quote(db.get("PASSWORD") or "", safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{credentials}{host}{port}/{quote(db['NAME'], safe='')}"


@contextmanager
def worker_queue() -> Iterator[str]:
    """A queue of this test alone, so that concurrent test runs on one Redis do not take
    each other's tasks; what this process enqueues goes to it, and not eagerly."""
    broker = redis_url()  # skips the test when there is none
    queue = f"test-{uuid.uuid4().hex[:12]}"
    conf = celery_app.conf
    saved = conf.task_default_queue, conf.task_always_eager
    conf.task_default_queue, conf.task_always_eager = queue, False
    try:
        yield queue
    finally:
        conf.task_default_queue, conf.task_always_eager = saved
        purge_queue(broker, queue)


def purge_queue(broker: str, queue: str) -> None:
    """Drop what the test left of its queue in Redis: messages nobody will consume (e.g. a
    retry), and the bindings of its exchange (named after the queue)."""
    client = redis.Redis.from_url(broker)
    with client:
        client.delete(
            queue,
            *client.keys(f"{queue}\x06*"),  # its priority sub-queues
            f"_kombu.binding.{queue}",
            f"_kombu.binding_permanent.{queue}",
        )


class CeleryWorker:
    """One ``celery worker`` process group."""

    def __init__(self, *, queue: str, env: Mapping[str, str], log_path: Path) -> None:
        self.queue = queue
        self.name = f"test-{uuid.uuid4().hex[:8]}@%h"
        self.env = dict(env)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> CeleryWorker:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "neocloud",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "--prefetch-multiplier",
            "1",
            "--loglevel",
            "INFO",
            "-n",
            self.name,
            "-Q",
            self.queue,
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() reaches the children
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while " ready." not in self.log():
            if self._exited(0):
                self.kill()
                raise RuntimeError(f"the celery worker exited before it was ready:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the celery worker was not ready in time:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None and not self._exited(0)

    def _exited(self, timeout: float) -> bool:
        """Whether the main process exited (within ``timeout``), leaving it unreaped: while
        it is a zombie, its process group id cannot go to another process."""
        assert self.process is not None
        if self.process.returncode is not None:
            return True
        deadline = time.monotonic() + timeout
        while True:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            if os.waitid(os.P_PID, self.process.pid, flags) is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the whole group at once: nothing gets to ack, reject or clean up."""
        if self.process is None or self.process.returncode is not None:
            return  # reaped: its group id is no longer ours to signal
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """A warm shutdown (SIGTERM), then SIGKILL if it takes longer than ``timeout``."""
        if self.process is None or self.process.returncode is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        self._exited(timeout)
        self.kill()  # what is left of the group (pool children), then reap


def worker_env(*, queue: str, settings: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment of a worker: this process's, on the test database and the test's
    queue, plus ``settings`` as environment variables of the same names."""
    missing = [
        name
        for name in [
            "CELERY_TASK_DEFAULT_QUEUE",
            "CELERY_BROKER_TRANSPORT_OPTIONS",
            *(settings or {}),
        ]
        if not hasattr(django_settings, name)
    ]
    if missing:
        # The worker reads these from its environment through the settings module; without
        # them it would consume the test's queue but send its own tasks elsewhere.
        raise RuntimeError(f"{os.environ.get('DJANGO_SETTINGS_MODULE')} lacks settings {missing}")
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "tests.settings"),
        DATABASE_URL=worker_database_url(),
        REDIS_URL=redis_url(),
        CELERY_TASK_DEFAULT_QUEUE=queue,
        CELERY_VISIBILITY_TIMEOUT_S=str(VISIBILITY_TIMEOUT_S),
        PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")])),
    )
    for name, value in (settings or {}).items():
        env[name] = value if isinstance(value, str) else json.dumps(value)
    return env


@contextmanager
def celery_worker(
    *, queue: str, log_dir: Path, settings: Mapping[str, Any] | None = None
) -> Iterator[CeleryWorker]:
    """A started worker consuming ``queue``; stopped (killed if need be) on exit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    worker = CeleryWorker(
        queue=queue,
        env=worker_env(queue=queue, settings=settings),
        log_path=log_dir / f"worker-{uuid.uuid4().hex[:8]}.log",
    )
    try:
        yield worker.start()
    finally:
        worker.stop()


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail the test with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)
