from __future__ import annotations

from neocloud.core.errors import ValidationFailed


class NotAWebPort(ValidationFailed):
    """The port named is not one of the workload's ``http_ports``: no token opens it."""

    code = "not_a_web_port"
