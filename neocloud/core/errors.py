"""The one error base of the application.

Every expected failure is an ``ApplicationError`` subclass with a stable ``code`` and an HTTP
status; the API renders them all in one JSON shape (``neocloud.api.errors``). This module is
plain Python so that every app, ``events`` included, can raise these without importing Django.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ApplicationError(Exception):
    """A failure a caller can act on: stable ``code``, HTTP status, message and field details."""

    code: ClassVar[str] = "error"
    http_status: ClassVar[int] = 400
    # Retryable failures (a conflict, a transient outage) may succeed if tried again;
    # terminal ones (bad input) never will.
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        fields: dict[str, list[str]] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        self.details = details or {}


class ValidationFailed(ApplicationError):
    """The request is wrong as written; ``fields`` names each field and its problems."""

    code = "invalid"
    http_status = 400


class NotFound(ApplicationError):
    """No such object, or not one this caller may see (another tenant's is never a 403)."""

    code = "not_found"
    http_status = 404


class Conflict(ApplicationError):
    """The state does not allow this now (a concurrent change, a finished object)."""

    code = "conflict"
    http_status = 409
    retryable = True


class LostRace(Conflict):
    """What the change decided on moved under it: a concurrent change committed first. The
    same change, run again from the start on fresh state, may succeed, so
    ``neocloud.core.transactions.atomic_with_retry`` runs it again (the log's
    ``StreamConflict`` is one)."""

    code = "lost_race"
