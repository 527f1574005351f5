"""Payment standing, as billing will decide it. Billing registers a check when it arrives;
until then no check refuses anything.

A check takes the organization and returns None (may order) or the reason it may not, e.g.
``"invoice INV-0042 is 30 days overdue"``; the order is then refused with
``payment_required``.
"""

from __future__ import annotations

from collections.abc import Callable

from tenants.models import Organization

PaymentCheck = Callable[[Organization], str | None]

_payment_checks: list[PaymentCheck] = []


def register_payment_check(check: PaymentCheck) -> PaymentCheck:
    """Add a check (usable as a decorator); registering the same function again is a no-op."""
    if check not in _payment_checks:
        _payment_checks.append(check)
    return check


def unregister_payment_check(check: PaymentCheck) -> None:
    if check in _payment_checks:
        _payment_checks.remove(check)


def payment_refusal(organization: Organization) -> str | None:
    """The first refusal of the registered checks, or None."""
    for check in _payment_checks:
        refusal = check(organization)
        if refusal:
            return refusal
    return None
