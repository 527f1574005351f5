"""Expected arrivals, for start-time forecasts: the work likely to be submitted in the near
future, from what was submitted in the recent past.

The model is "the recent past repeats". The submissions of the last ``window_s`` before
``now`` (never before ``known_since``, when the caller's log begins: then the window is what
the log covers) are replayed shifted forward by the window's length, then by twice that, and
so on up to ``look_ahead_s`` after ``now``: each replay is the same request (queue, priority,
shape, runtime estimate, tenant) submitted one window later, with an id of its own. Replays
come in the order of their submission, earliest first, and stop at ``max_arrivals``, so an
outlook stays bounded whatever the log's length or the horizon; work of a priority below
``min_priority`` is left out (it can only queue behind work waiting now, see ``forecast``).

Everything expected is after ``now``, and the ids begin with ``EXPECTED``, which the service's
ids (UUIDs) and the simulator's (``job-N``) never do. The same submissions give the same
arrivals: no randomness.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from scheduler.engine.model import Request, Value

EXPECTED: Final = "~expected:"


@dataclass(frozen=True, slots=True)
class Outlook(Value):
    """How the recent past is replayed (see the module's docstring)."""

    window_s: float = 3 * 3600.0
    look_ahead_s: float = 6 * 3600.0
    max_arrivals: int = 200
    min_window_s: float = 600.0  # a shorter log says too little: nothing is expected


def expected_arrivals(
    submitted: Iterable[Request],
    now: float,
    outlook: Outlook = Outlook(),
    *,
    known_since: float = -math.inf,
    min_priority: int | None = None,
) -> list[Request]:
    """The arrivals expected after ``now``, in order of submission, from the requests
    ``submitted`` so far (any order; those after ``now`` are ignored)."""
    since = max(now - outlook.window_s, known_since)
    window = now - since
    if window < outlook.min_window_s or outlook.max_arrivals <= 0:
        return []
    recent = sorted(
        (r for r in submitted if since < r.submitted_at <= now),
        key=lambda r: (r.submitted_at, r.id),
    )
    if min_priority is not None:
        recent = [r for r in recent if r.priority >= min_priority]
    arrivals: list[Request] = []
    last = now + outlook.look_ahead_s
    for repeat in range(1, math.ceil(outlook.look_ahead_s / window) + 1):
        for request in recent:
            at = request.submitted_at + repeat * window
            if at > last or len(arrivals) >= outlook.max_arrivals:
                return arrivals
            arrivals.append(
                replace(request, id=f"{EXPECTED}{repeat}:{request.id}", submitted_at=at)
            )
    return arrivals


def replayed(arrival: str) -> str:
    """The id of the submission an expected arrival replays (its runtime is that one's)."""
    return arrival.removeprefix(EXPECTED).split(":", 1)[1]
