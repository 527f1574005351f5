"""Execution errors."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, NotFound, ValidationFailed


class UnknownAssignment(ValidationFailed):
    """A report or a chunk names an assignment that is not this node's (or none at all):
    the agent drops it rather than sending it again."""

    code = "unknown_assignment"


class UnknownAllocation(NotFound):
    """A run was started for an allocation that does not exist."""

    code = "unknown_allocation"


class TooManyFollows(ApplicationError):
    """The key or the organization has as many logs follows open as it may
    (``LOG_FOLLOWS_PER_KEY``, ``LOG_FOLLOWS_PER_ORGANIZATION``): each holds a connection."""

    code = "too_many_follows"
    http_status = 429
