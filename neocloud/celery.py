"""The Celery application.

With ``REDIS_URL`` set, tasks go through Redis to separate ``celery -A neocloud worker`` and
``celery -A neocloud beat`` processes. Without it (the embedded default) tasks run eagerly in
the calling process, so the one-command demo needs no broker.

A task carries the correlation id bound where it was sent (a request, another task) in its
message's headers; the worker binds it while the task runs, so the task's log lines and the
events it appends carry the id of the call that caused them.
"""

from __future__ import annotations

import logging.config
import os
from collections.abc import Mapping
from contextvars import Token
from typing import Any

from celery import Celery, Task, signals

from neocloud.core.correlation import correlation_bind, correlation_current, correlation_reset
from neocloud.core.logs import structlog_configure
from neocloud.core.startup import settings_load_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neocloud.settings")

app = Celery("neocloud")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.on_configure.connect
def _settings_load(**kwargs: Any) -> None:
    """Celery's configuration is the settings, first read while ``celery`` parses its
    command line: a missing variable is then one line, not a traceback."""
    settings_load_or_exit()


app.autodiscover_tasks()

# Not Celery's own ``correlation_id`` (a message property holding the task's id).
HEADER = "neocloud_correlation_id"
# What each running task bound, to restore when it ends (by task id: prerun and postrun are
# separate calls; eager tasks nest inside the caller's context).
_bound: dict[str, Mapping[str, Token[Any]]] = {}


@signals.setup_logging.connect
def _logging(**kwargs: Any) -> None:
    """Workers and beat log through Django's ``LOGGING`` (structlog) instead of Celery's."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    structlog_configure()


@signals.before_task_publish.connect
def _send_correlation(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    correlation_id = correlation_current()
    if headers is not None and correlation_id is not None:
        headers.setdefault(HEADER, correlation_id)


@signals.task_prerun.connect
def _bind_correlation(task_id: str, task: Task[Any, Any], **kwargs: Any) -> None:
    correlation_id = getattr(task.request, HEADER, None) or correlation_current()
    if correlation_id is not None:
        _bound[task_id] = correlation_bind(correlation_id, task=task.name, task_id=task_id)


@signals.task_postrun.connect
def _unbind_correlation(task_id: str, **kwargs: Any) -> None:
    tokens = _bound.pop(task_id, None)
    if tokens is not None:
        correlation_reset(tokens)
