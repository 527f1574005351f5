"""Log lines: structlog renders every record, from structlog and stdlib ``logging`` alike
(Django, Celery, the project), as JSON lines on stdout in production and readable coloured
lines in the embedded default. Each line carries what is bound in the context (the
correlation id of the request or task, see ``neocloud.core.correlation``).

A traceback names each frame's file, line and function, never its local variables: the frames
of a failing request hold its API key, node token, password or secret values. A credential in
a URL's path (a password reset's or an invitation's token) is logged as ``[redacted]``."""

from __future__ import annotations

from typing import Any

import structlog
from django.http import HttpRequest
from structlog.typing import EventDict, Processor, WrappedLogger

from neocloud.core.redaction import REDACTED, is_credential


def request_path(request: HttpRequest) -> str:
    """The request's path, each URL argument named like a credential (``token``) redacted."""
    path = request.path
    match = request.resolver_match
    for name, value in (match.kwargs if match else {}).items():
        if is_credential(name) and isinstance(value, str) and value:
            path = path.replace(value, REDACTED)
    return path


def without_url_credentials(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Django's own lines (``django.request``: "Forbidden: <path>", with the request as an
    extra) name the request's path, in the message and in whatever copied it: each gets it
    redacted, and the request is shown as method and redacted path (its repr holds the query
    string too)."""
    request = event_dict.get("request")
    if not isinstance(request, HttpRequest):
        return event_dict
    shown = request_path(request)
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = value.replace(request.path, shown)
    event_dict["request"] = f"{request.method} {shown}"
    return event_dict


# Applied to stdlib records (``foreign_pre_chain``) and to structlog's own before rendering.
SHARED: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.ExtraAdder(),
    without_url_credentials,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]


# structlog's defaults show locals: ``dict_tracebacks`` always, ConsoleRenderer when rich is
# installed. The plain stdlib traceback has none, whatever is installed.
structured_tracebacks = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


def renderer(fmt: str) -> Processor:
    """``json``: one object a line, tracebacks as structured data; ``console``: for people."""
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback
    )


def formatter(fmt: str) -> structlog.stdlib.ProcessorFormatter:
    """The formatter of the stdout handler (``LOGGING``'s ``()`` factory)."""
    final: list[Processor] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if fmt == "json":
        final.append(structured_tracebacks)
    final.append(renderer(fmt))
    return structlog.stdlib.ProcessorFormatter(processors=final, foreign_pre_chain=SHARED)


def logging_config(*, fmt: str, level: str, loggers: dict[str, Any]) -> dict[str, Any]:
    """Django's ``LOGGING``: one handler, on stdout, through structlog."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"structlog": {"()": formatter, "fmt": fmt}},
        "handlers": {
            "stdout": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
                "formatter": "structlog",
            }
        },
        "root": {"handlers": ["stdout"], "level": level},
        "loggers": loggers,
    }


def structlog_configure() -> None:
    """structlog's own loggers hand their events to stdlib logging, so both share the
    handler above (and its level, filters and format)."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *SHARED,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
