"""Errors of the fleet."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, Conflict


class InvalidTransition(Conflict):
    """The node's state does not allow the action; nothing changed."""

    code = "invalid_transition"
    retryable = False


class UnknownGpu(ApplicationError):
    """A node reported a GPU index its fleet record does not have."""

    code = "unknown_gpu"
    http_status = 400
