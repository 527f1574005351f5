"""Money: integer minor units of an ISO 4217 currency, never a float.

Rounding rule, applied once per invoice line: the line's exact amount is a rational number
(``Fraction``: milli-GPU-seconds x price per GPU-hour / 3,600,000, or a tax base x a rate) and
is rounded half up to the minor unit (0.5 of a cent goes up; amounts here are never negative
before rounding). Totals are sums of rounded lines, so they add up to the minor unit on the
page and nothing is lost or made between lines and totals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

CURRENCY = re.compile(r"^[A-Z]{3}$")


def round_half_up(amount: Fraction) -> int:
    """The nearest integer, halves away from zero (``Fraction`` keeps the amount exact)."""
    if amount < 0:
        return -round_half_up(-amount)
    return int((amount * 2 + 1) // 2)


@dataclass(frozen=True, slots=True, order=True)
class Money:
    """An amount in minor units (cents for USD) of ``currency``."""

    currency: str
    minor: int

    def __post_init__(self) -> None:
        if not CURRENCY.match(self.currency):
            raise ValueError(f"not an ISO 4217 code: {self.currency!r}")
        if not isinstance(self.minor, int) or isinstance(self.minor, bool):
            raise TypeError("money is an integer number of minor units")

    @classmethod
    def zero(cls, currency: str) -> Money:
        return cls(currency, 0)

    @classmethod
    def rounded(cls, currency: str, exact: Fraction) -> Money:
        """``exact`` minor units rounded half up: the one place an invoice line rounds."""
        return cls(currency, round_half_up(exact))

    def _same(self, other: Money) -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot mix {self.currency} and {other.currency}")

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.currency, self.minor + other.minor)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.currency, self.minor - other.minor)

    def __neg__(self) -> Money:
        return Money(self.currency, -self.minor)

    def format(self) -> str:
        """For people: ``USD 1,234.56`` (two decimals; our currencies all have cents)."""
        sign = "-" if self.minor < 0 else ""
        whole, cents = divmod(abs(self.minor), 100)
        return f"{sign}{self.currency} {whole:,}.{cents:02d}"
