"""Errors of the fleet."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, Conflict


class InvalidTransition(Conflict):
    """The node's state does not allow the action; nothing changed."""

    code = "invalid_transition"
    retryable = False


class NodeTokenInvalid(ApplicationError):
    code = "node_token_invalid"
    http_status = 401


class UnknownGpu(ApplicationError):
    code = "unknown_gpu"
    http_status = 400
