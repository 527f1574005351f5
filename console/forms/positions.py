"""Positions in a query string: a workload's logs ``cursor``, the audit feed's ``before``."""

from __future__ import annotations

import re

BIGINT_MAX = 2**63 - 1  # positions are bigint ids: a larger number is no place in a log
DIGITS = re.compile(r"[0-9]{1,19}")


def check_position(text: str) -> int | None:
    """``text`` as a position, else None. ASCII digits only: ``str.isdigit`` passes ``²``,
    which ``int`` refuses, and ``int`` refuses more than 4,300 digits."""
    if DIGITS.fullmatch(text) is None:
        return None
    position = int(text)
    return position if position <= BIGINT_MAX else None
