"""Reads of start-time estimates (``services.estimates`` writes them): those of some
workloads at once, and what an estimate rests on in words."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from scheduler.engine.forecast import Basis
from scheduler.models import Workload, WorkloadEstimate

# What each basis says, as the end of "from ..." (runtimes) or of "it waits for ..." (waits).
RUNTIME_WORDS = {
    Basis.RUNTIME_ESTIMATES: "the runtime estimates of the work ahead",
    Basis.LEARNED_RUNTIMES: "runtimes learned from past runs where no estimate was given",
    Basis.DEFAULT_RUNTIMES: "a default runtime where there is neither an estimate nor history",
}
WAIT_WORDS = {
    Basis.RESERVATION: "a reservation's window",
    Basis.HEAD_OF_LINE: "a workload held at the head of the line",
    Basis.QUOTA: "its queue's quota",
}


def workload_estimates(workload_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, WorkloadEstimate]:
    """The last estimate of each of these workloads that has one (one query)."""
    ids = list(workload_ids)
    if not ids:
        return {}
    return {e.workload_id: e for e in WorkloadEstimate.objects.filter(workload_id__in=ids)}


def estimate_message(workload: Workload, estimate: WorkloadEstimate) -> str:
    """What the estimate rests on, in a sentence (or why there is no time)."""
    basis = set(estimate.basis)
    if Basis.NEVER in basis:
        models = ", ".join(workload.gpu_models) or "any GPU model"
        return (
            "It can never start on this cluster: even with nothing else running, no schedulable"
            f" node of {models} here could hold what it asks for."
        )
    if Basis.NOW in basis:
        return "What it needs is free: it should start in the next cycle."
    runtimes = [words for code, words in RUNTIME_WORDS.items() if code in basis]
    waits = [words for code, words in WAIT_WORDS.items() if code in basis]
    said = f"From {_joined(runtimes)}" if runtimes else "From the work running now"
    if waits:
        said += f"; it waits for {_joined(waits)}"
    said += "."
    if Basis.BEYOND_HORIZON in basis:
        said += " It does not start within the forecast's horizon (7 days)."
    return said


def _joined(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
