"""Fair share: past usage decays with a half-life, and waiting raises priority (aging)."""

from __future__ import annotations

import math
from dataclasses import dataclass


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """``usage`` recorded ``elapsed_s`` ago, as it counts now."""
    if half_life_s <= 0:
        return 0.0
    return usage * math.pow(0.5, max(0.0, elapsed_s) / half_life_s)


def effective_priority(
    priority: int, waited_s: float, per_hour: float, step_s: float = 0.0
) -> float:
    """Aging: every hour of waiting adds ``per_hour`` to the priority, so nothing starves;
    counted in whole steps of ``step_s`` (0: continuously). Work of one effective priority is
    ordered by fair share: with steps, that is all work of a priority waiting within a step."""
    waited = max(0.0, waited_s)
    if step_s > 0:
        waited = math.floor(waited / step_s) * step_s
    return priority + per_hour * waited / 3600.0


def jain_index(shares: list[float]) -> float:
    """Jain's fairness index of normalised shares: 1 when equal, 1/n at worst."""
    if not shares or not any(shares):
        return 1.0
    return sum(shares, 0.0) ** 2 / (len(shares) * sum((s * s for s in shares), 0.0))


@dataclass(slots=True)
class _Tally:
    total: float  # milli-GPU-hours, decayed to ``at``
    held: int  # milli-GPU held since ``at``
    at: float


class DecayedUsage:
    """Usage per key (a queue, an organization) in milli-GPU-hours, each past instant's
    weighing half as much every ``half_life_s``: what ``Policy.usage_history`` holds.

    Kept as two figures per key, the decayed total at an instant and what is held since, so
    memory does not grow with the history. Holdings start and stop at instants on the
    caller's clock, in any order: one that starts (or stops) before a key's last instant
    corrects its total for the time in between."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self._tallies: dict[str, _Tally] = {}

    def _area(self, elapsed_s: float) -> float:
        """Milli-GPU-hours of one milli-GPU held for the last ``elapsed_s``, decayed."""
        if self.half_life_s <= 0 or elapsed_s <= 0:
            return 0.0
        h = self.half_life_s
        return h / math.log(2) * (1 - math.pow(0.5, elapsed_s / h)) / 3600.0

    def _at(self, key: str, now: float) -> _Tally:
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally(0.0, 0, now)
        elif now > tally.at:
            elapsed = now - tally.at
            tally.total = decay(tally.total, elapsed, self.half_life_s) + tally.held * self._area(
                elapsed
            )
            tally.at = now
        return tally

    def start(self, key: str, milli: int, at: float) -> None:
        """``key`` holds ``milli`` more milli-GPU from ``at`` on."""
        self._change(key, milli, at)

    def stop(self, key: str, milli: int, at: float) -> None:
        """``key`` holds ``milli`` less from ``at`` on."""
        self._change(key, -milli, at)

    def _change(self, key: str, milli: int, at: float) -> None:
        tally = self._at(key, at)
        if at < tally.at:
            tally.total += milli * self._area(tally.at - at)
        tally.held += milli

    def as_of(self, now: float) -> dict[str, float]:
        """Every key's decayed usage at ``now``; keys that hold nothing and have decayed to
        nothing are forgotten."""
        result: dict[str, float] = {}
        for key in list(self._tallies):
            tally = self._at(key, now)
            if tally.held == 0 and tally.total < 1e-9:
                del self._tallies[key]
                continue
            result[key] = max(0.0, tally.total)
        return result


class FairShareUsage:
    """The decayed usage of every queue and organization of a cluster, as its allocations
    start and stop: what fair share orders by (``Policy.usage_history`` and
    ``Policy.organization_usage``)."""

    def __init__(self, half_life_s: float) -> None:
        self.queues = DecayedUsage(half_life_s)
        self.organizations = DecayedUsage(half_life_s)

    def start(self, queue: str, organization: str, milli: int, at: float) -> None:
        self.queues.start(queue, milli, at)
        self.organizations.start(organization, milli, at)

    def stop(self, queue: str, organization: str, milli: int, at: float) -> None:
        self.queues.stop(queue, milli, at)
        self.organizations.stop(organization, milli, at)

    def as_of(self, now: float) -> tuple[dict[str, float], dict[str, float]]:
        """(per queue, per organization) at ``now``."""
        return self.queues.as_of(now), self.organizations.as_of(now)
