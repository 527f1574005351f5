"""Default GPU prices: what usage from no offering costs.

Concurrency: a price is one row per (GPU model, plan), written with ``update_or_create`` on
that unique pair, so two operators setting it at once leave one row (the last write wins).
"""

from __future__ import annotations

from billing.errors import BillingInvalid
from billing.models import PLANS, DefaultGpuPrice
from billing.money import CURRENCY
from inventory.models import GpuModel
from tenants.access import Action, Actor


def default_price_set(
    *,
    actor: Actor,
    gpu_model: str,
    price_per_gpu_hour_minor: int,
    currency: str,
    price_plan: str = "on_demand",
) -> DefaultGpuPrice:
    """Set (create or replace) the price of usage from no offering on ``gpu_model`` under
    ``price_plan``: without one, a month with such usage cannot be invoiced. Operators'
    configuration, like the admin's form: a table, not an event (rating copies the price it
    used into ``InvoiceDrafted``)."""
    actor.require(Action.BILLING_OPERATE)
    problems: dict[str, list[str]] = {}
    if not GpuModel.objects.filter(slug=gpu_model).exists():
        problems["gpu_model"] = [f"unknown GPU model {gpu_model!r}"]
    if price_plan not in dict(PLANS):
        problems["price_plan"] = [f"one of {', '.join(dict(PLANS))}"]
    if not CURRENCY.match(currency):
        problems["currency"] = ["an ISO 4217 code such as USD"]
    if price_per_gpu_hour_minor < 0:
        problems["price_per_gpu_hour_minor"] = ["not negative"]
    if problems:
        raise BillingInvalid("default price is not valid", fields=problems)
    price, _ = DefaultGpuPrice.objects.update_or_create(
        gpu_model=gpu_model,
        price_plan=price_plan,
        defaults={"price_per_gpu_hour_minor": price_per_gpu_hour_minor, "currency": currency},
    )
    return price
