"""Fair share: past usage decays with a half-life, and waiting raises priority (aging)."""

from __future__ import annotations

import math


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """``usage`` recorded ``elapsed_s`` ago, as it counts now."""
    if half_life_s <= 0:
        return 0.0
    return usage * math.pow(0.5, max(0.0, elapsed_s) / half_life_s)


def effective_priority(priority: int, waited_s: float, per_hour: float) -> float:
    """Aging: every hour of waiting adds ``per_hour`` to the priority, so nothing starves."""
    return priority + per_hour * max(0.0, waited_s) / 3600.0


def jain_index(shares: list[float]) -> float:
    """Jain's fairness index of normalised shares: 1 when equal, 1/n at worst."""
    if not shares or not any(shares):
        return 1.0
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))
