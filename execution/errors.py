"""Execution errors."""

from __future__ import annotations

from neocloud.core.errors import NotFound, ValidationFailed


class UnknownAssignment(ValidationFailed):
    """A report or a chunk names an assignment that is not this node's (or none at all):
    the agent drops it rather than sending it again."""

    code = "unknown_assignment"


class UnknownAllocation(NotFound):
    """A run was started for an allocation that does not exist."""

    code = "unknown_allocation"
