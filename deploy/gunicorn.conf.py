"""gunicorn's configuration for NeoCloud (``gunicorn -c deploy/gunicorn.conf.py
neocloud.asgi:application``). Its workers are uvicorn's: the ASGI application, on which a long
poll (an agent's assignments, a followed log) waits in a coroutine and holds no thread, while
every other request gets a thread of its own (``execution.longpoll``). With
``PROMETHEUS_MULTIPROC_DIR`` set, each worker writes its metrics to files there and
``/metrics`` sums them; a worker that dies leaves its totals (they stay in the sums, so no
counter goes backwards) and has its live gauges dropped here."""

import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "4"))
worker_class = "uvicorn_worker.UvicornWorker"
timeout = 120


def child_exit(server: object, worker: object) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined,no-untyped-call]
