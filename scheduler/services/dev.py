"""Dev environments (issue 32): a workload of kind ``dev`` is a place to work on GPUs. It
always takes SSH, runs until stopped (``sleep infinity`` where it names neither a command nor
an image), and is stopped by its node's agent after ``idle_stop_s`` without an SSH session
and without GPU use; it is billed per second like any work."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings

from scheduler.services.shape import invalid
from scheduler.specs import MAX_RUNTIME_S, WorkloadKind, WorkloadSpec

KEEPALIVE = ("sleep", "infinity")
MIN_IDLE_STOP_S = 1.0


def dev_environment(spec: WorkloadSpec) -> WorkloadSpec:
    """The spec as submitted: a dev environment's defaults filled in; ``idle_stop_s`` is
    refused on any other kind, and out of its bounds."""
    if spec.kind is not WorkloadKind.DEV:
        if spec.idle_stop_s is not None:
            raise invalid("idle_stop_s", "idle_stop_s is a dev environment's (kind dev)")
        return spec
    idle = settings.DEV_IDLE_STOP_S if spec.idle_stop_s is None else spec.idle_stop_s
    if not MIN_IDLE_STOP_S <= idle <= MAX_RUNTIME_S:
        raise invalid("idle_stop_s", f"idle_stop_s is between 1 and {MAX_RUNTIME_S} s")
    command = spec.command or (KEEPALIVE if spec.image is None else ())
    return replace(spec, ssh=True, idle_stop_s=idle, command=command)
