"""The correlation id of the request or task being handled, for its log lines and its events.

It lives in structlog's context variables, so every log line rendered while it is bound
carries it (``merge_contextvars``), and the event store records it in the metadata of what is
appended meanwhile (``events.store.Metadata``). Context variables follow the thread (and an
``asyncio`` task), so two requests served at once never see each other's id.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token
from typing import Any

import structlog

KEY = "correlation_id"
HEADER = "X-Request-ID"
# A caller's id is kept when it looks like one (a UUID, a proxy's hex id, `req-42`); anything
# else (too long, spaces, control characters) is replaced: it ends up in logs and events.
_ACCEPTED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/=+-]{0,127}")


def correlation_from(supplied: str | None) -> str:
    """The caller's id when it is acceptable, else a new one."""
    if supplied and _ACCEPTED.fullmatch(supplied):
        return supplied
    return str(uuid.uuid4())


def correlation_current() -> str | None:
    """The id bound now, if any."""
    value = structlog.contextvars.get_contextvars().get(KEY)
    return str(value) if value is not None else None


def correlation_bind(correlation_id: str, **context: object) -> Mapping[str, Token[Any]]:
    """Bind the id (and more context for the log lines); ``correlation_reset`` with what this
    returns restores what was bound before, so an eager task run inside a request leaves the
    request's id in place."""
    return structlog.contextvars.bind_contextvars(**{KEY: correlation_id, **context})


def correlation_reset(tokens: Mapping[str, Token[Any]]) -> None:
    structlog.contextvars.reset_contextvars(**tokens)


@contextmanager
def correlation_bound(correlation_id: str, **context: object) -> Iterator[None]:
    """``correlation_bind`` for the length of a block."""
    tokens = correlation_bind(correlation_id, **context)
    try:
        yield
    finally:
        correlation_reset(tokens)
