"""A fixed-window count per key in the shared cache: how the console bounds what anyone may
ask of it without an account (password resets send mail, sign-ups make organizations).

Redis in production, so every web process counts together; the window starts with the first
request of a key, and a request past the limit is refused until the window ends.
"""

from __future__ import annotations

from django.core.cache import cache


def allow(scope: str, key: str, *, limit: int, window_s: int) -> bool:
    """Count one request of ``key``; whether it is within ``limit`` per ``window_s``."""
    name = f"ratelimit:{scope}:{key}"
    if cache.add(name, 1, timeout=window_s):
        return limit >= 1
    try:
        return int(cache.incr(name)) <= limit
    except ValueError:  # expired between add and incr: a new window
        cache.add(name, 1, timeout=window_s)
        return limit >= 1
