"""gunicorn's configuration for NeoCloud (``gunicorn -c deploy/gunicorn.conf.py
neocloud.wsgi``). With ``PROMETHEUS_MULTIPROC_DIR`` set, each worker writes its metrics to
files there and ``/metrics`` sums them; a worker that dies leaves its totals (they stay in
the sums, so no counter goes backwards) and has its live gauges dropped here."""

import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "4"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "8"))  # node agents' long polls hold a thread
timeout = 120


def child_exit(server: object, worker: object) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined,no-untyped-call]
