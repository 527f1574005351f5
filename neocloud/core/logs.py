"""Log lines: structlog renders every record, from structlog and stdlib ``logging`` alike
(Django, Celery, the project), as JSON lines on stdout in production and readable coloured
lines in the embedded default. Each line carries what is bound in the context (the
correlation id of the request or task, see ``neocloud.core.correlation``).

A traceback names each frame's file, line and function, never its local variables: the frames
of a failing request hold its API key, node token, password or secret values."""

from __future__ import annotations

from typing import Any

import structlog
from structlog.typing import Processor

# Applied to stdlib records (``foreign_pre_chain``) and to structlog's own before rendering.
SHARED: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.ExtraAdder(),
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
