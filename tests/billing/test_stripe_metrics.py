"""Billing's calls to Stripe and the webhooks it receives, as ``/metrics`` counts them (the
process-local counters of ``monitoring``, fed through ``billing.hooks``)."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from billing.models import Invoice
from tests.billing.test_stripe import attach, deliver, invoice, pay, stripe_events
from tests.builders import commerce as commerce_builders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
__all__ = ["invoice"]  # the fixture, for this module's tests


def _count(name: str, **labels: str) -> float:
    """The sum of a counter's samples with these labels in this process's /metrics."""
    body = Client().get("/metrics").content.decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def test_stripe_calls_and_webhook_deliveries_are_counted(
    localstripe: str, customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    calls = _count("neocloud_stripe_requests_total", outcome="ok")
    delivered = _count("neocloud_webhooks_total", provider="stripe", result="ok")

    attach(customer, "pm_card_visa")
    pay(customer, invoice)

    assert _count("neocloud_stripe_requests_total", outcome="ok") >= calls + 2  # attach, charge
    (succeeded,) = stripe_events(localstripe, invoice)
    assert deliver(succeeded).status_code == 200
    assert deliver(succeeded).status_code == 200  # a duplicate: delivered all the same
    assert _count("neocloud_webhooks_total", provider="stripe", result="ok") == delivered + 2
    refused = _count("neocloud_webhooks_total", provider="stripe", result="error")
    assert deliver(succeeded, secret="whsec_wrong").status_code == 400
    assert _count("neocloud_webhooks_total", provider="stripe", result="error") == refused + 1
