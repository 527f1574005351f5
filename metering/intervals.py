"""Usage intervals in integers: microsecond instants, milli-GPU-seconds, UTC day slices.

The rounding rule. An allocation holding ``m`` milli-GPUs (GPUs x ``gpu_milli``, summed over
its placements) from grant ``g`` meters, for any part ``[a, b)`` of its interval (instants in
integer microseconds since the epoch)::

    floor(m * (b - g) / 1e6) - floor(m * (a - g) / 1e6)   milli-GPU-seconds

that is, the floor of milli-GPU x microseconds / 1e6 of the time since the grant, taken at both
ends. The parts of an interval telescope: however it is cut (UTC days, months, a query's
window), they add up to exactly ``floor(m * (release - g) / 1e6)``, the interval rounded
once. No part is off by more than one from its own rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICRO = 1_000_000
DAY_US = 86_400 * MICRO
MILLI_GPU_SECONDS_PER_GPU_HOUR = 3_600_000


def to_us(instant: datetime) -> int:
    """Microseconds since the epoch (exact: datetimes carry whole microseconds)."""
    return (instant - EPOCH) // timedelta(microseconds=1)


def from_us(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def metered(milli_gpus: int, granted_us: int, start_us: int, end_us: int) -> int:
    """Milli-GPU-seconds of ``[start, end)`` of an allocation granted at ``granted_us``."""
    return (milli_gpus * (end_us - granted_us)) // MICRO - (
        milli_gpus * (start_us - granted_us)
    ) // MICRO


def day_slices(start_us: int, end_us: int) -> Iterator[tuple[date, int, int]]:
    """``[start, end)`` cut at UTC midnights: (day, start, end) of each non-empty part."""
    while start_us < end_us:
        midnight = (start_us // DAY_US + 1) * DAY_US
        stop = min(end_us, midnight)
        yield from_us(start_us).date(), start_us, stop
        start_us = stop


def month_of(instant: datetime) -> tuple[datetime, datetime]:
    """The UTC month holding ``instant``: [first instant, first instant of the next)."""
    start = instant.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + timedelta(days=32)).replace(day=1)
    return start, following


def gpu_seconds(milli_gpu_seconds: int) -> str:
    """A decimal string with the milli kept exact (no float)."""
    whole, milli = divmod(milli_gpu_seconds, 1000)
    return f"{whole}.{milli:03d}"


def gpu_hours(milli_gpu_seconds: int) -> str:
    """GPU-hours as a decimal string to the thousandth (budgets are set in those steps)."""
    return f"{Decimal(milli_gpu_seconds) / MILLI_GPU_SECONDS_PER_GPU_HOUR:.3f}"
