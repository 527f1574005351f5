"""Process-local metrics: what happens on a process's own path (a request, a cycle, a task, a
provisioning step, a Stripe call), which no table records.

With ``PROMETHEUS_MULTIPROC_DIR`` set, prometheus-client writes every value to a file per
process in that directory and ``/metrics`` sums the files of every process of the host
(gunicorn's and Celery's workers alike), so a scrape of any worker sees them all and a
restarted worker's totals are not lost. Without it (one process: the demo, tests) the values
live in ``LOCAL``. Only counters and histograms here: they aggregate across processes without
a mode to choose.
"""

from __future__ import annotations

import uuid

from prometheus_client import CollectorRegistry, Counter, Histogram

LOCAL = CollectorRegistry(auto_describe=True)

# Sub-second work: requests, cycles, Stripe calls.
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Provisioning steps call out to drivers: seconds to many minutes.
SLOW_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)

api_request_duration = Histogram(
    "neocloud_api_request_duration_seconds",
    "Time to answer an HTTP request, by route pattern, method and status code.",
    ["route", "method", "status"],
    buckets=FAST_BUCKETS,
    registry=LOCAL,
)
cycle_duration = Histogram(
    "neocloud_scheduling_cycle_duration_seconds",
    "Time of a scheduling cycle that decided, by cluster id.",
    ["cluster_id"],
    buckets=FAST_BUCKETS,
    registry=LOCAL,
)
cycle_decisions = Counter(
    "neocloud_scheduling_decisions_total",
    "Decisions of scheduling cycles, by cluster id and decision (granted, preempted).",
    ["cluster_id", "decision"],
    registry=LOCAL,
)
provisioning_step_duration = Histogram(
    "neocloud_provisioning_step_duration_seconds",
    "Time of a provisioning step's attempt, by phase, step and status.",
    ["phase", "step", "status"],
    buckets=SLOW_BUCKETS,
    registry=LOCAL,
)
provisioning_step_failures = Counter(
    "neocloud_provisioning_step_failures_total",
    "Provisioning step attempts that failed, by phase, step and status (retrying, failed).",
    ["phase", "step", "status"],
    registry=LOCAL,
)
celery_tasks = Counter(
    "neocloud_celery_tasks_total",
    "Celery tasks by name and outcome (succeeded, failed, retried, revoked).",
    ["task", "outcome"],
    registry=LOCAL,
)
stripe_requests = Counter(
    "neocloud_stripe_requests_total",
    "Calls to Stripe by operation and outcome (ok, or the error's class).",
    ["operation", "outcome"],
    registry=LOCAL,
)
stripe_request_duration = Histogram(
    "neocloud_stripe_request_duration_seconds",
    "Time of a call to Stripe (the SDK's retries included), by operation.",
    ["operation"],
    buckets=FAST_BUCKETS,
    registry=LOCAL,
)
webhooks = Counter(
    "neocloud_webhooks_total",
    "Webhook deliveries by provider, result (ok, error) and outcome (the first word of the"
    " service's outcome, or the error's code).",
    ["provider", "result", "outcome"],
    registry=LOCAL,
)

# How far off a start-time estimate was: seconds to a day.
ESTIMATE_BUCKETS = (10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
start_estimate_error = Histogram(
    "neocloud_start_estimate_error_seconds",
    "|estimated - actual start| of workloads that waited, once they started, by cluster id and"
    " kind (at_submission: the first estimate of the wait; latest: the last before the start).",
    ["cluster_id", "kind"],
    buckets=ESTIMATE_BUCKETS,
    registry=LOCAL,
)

STEP_FAILURES = frozenset({"retrying", "failed"})


# The hooks' answers (registered in ``MonitoringConfig.ready``). They run on the apps' paths:
# each only adds to a value in memory (or its process's file).


def request_finished(route: str, method: str, status: int, seconds: float) -> None:
    api_request_duration.labels(route, method, str(status)).observe(seconds)


def cycle_finished(
    cluster_id: uuid.UUID, seconds: float, granted: int, preempted: int, waiting: int
) -> None:
    cluster = str(cluster_id)
    cycle_duration.labels(cluster).observe(seconds)
    cycle_decisions.labels(cluster, "granted").inc(granted)
    cycle_decisions.labels(cluster, "preempted").inc(preempted)


def start_estimate_checked(cluster_id: uuid.UUID, kind: str, error_s: float) -> None:
    start_estimate_error.labels(str(cluster_id), kind).observe(error_s)


def provisioning_step_finished(phase: str, step: str, status: str, seconds: float) -> None:
    provisioning_step_duration.labels(phase, step, status).observe(seconds)
    if status in STEP_FAILURES:
        provisioning_step_failures.labels(phase, step, status).inc()


def stripe_called(operation: str, outcome: str, seconds: float) -> None:
    stripe_requests.labels(operation, outcome).inc()
    stripe_request_duration.labels(operation).observe(seconds)


def webhook_received(provider: str, outcome: str, failed: bool) -> None:
    # An outcome is a sentence ("ignored: attempt 2 has…"): its first word keeps the series few.
    word = outcome.split(":", 1)[0].split(" ", 1)[0] or "unknown"
    webhooks.labels(provider, "error" if failed else "ok", word).inc()


def task_finished(task: str, outcome: str) -> None:
    celery_tasks.labels(task, outcome).inc()
