"""Billing's dunning refuses every way of starting work, not only orders: an invoice left
unpaid (here written off) refuses workloads and reservations through the API as well."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from billing import services
from billing.models import Invoice
from scheduler.models import Reservation, Workload
from tenants.models import Role
from tests.billing.conftest import History
from tests.builders import SYSTEM, run
from tests.builders import commerce as commerce_builders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_an_unpaid_invoice_refuses_workloads_reservations_and_orders(
    customer: commerce_builders.Customer, history: History
) -> None:
    history.run(datetime(2025, 1, 3, tzinfo=UTC), datetime(2025, 1, 4, tzinfo=UTC))
    services.period_close(actor=SYSTEM, period=services.Period.parse("2025-01"))
    invoice = Invoice.objects.get(organization=customer.organization)
    run(services.invoice_mark_uncollectible, invoice=invoice, reason="card declined for good")
    client = customer.client(Role.MEMBER)
    starts_at = timezone.now() + timedelta(hours=1)

    workload = client.post(
        "/api/v1/workloads",
        {"project": str(customer.project.pk), "name": "fresh", "gpu_models": ["h100"]},
        format="json",
    )
    reservation = client.post(
        "/api/v1/reservations",
        {
            "project": str(customer.project.pk),
            "gpu_model": "h100",
            "gpus": 1,
            "starts_at": starts_at.isoformat(),
            "ends_at": (starts_at + timedelta(hours=1)).isoformat(),
        },
        format="json",
    )
    order = customer.post_order(offering="1xh100", price_plan="on_demand")

    for response in (workload, reservation, order):
        assert response.status_code == 400, response.json()
        error = response.json()["error"]
        assert error["code"] == "payment_required"
        assert error["message"].startswith(f"invoice {invoice.number} is unpaid")
    assert not Workload.objects.filter(name="fresh").exists()
    assert not Reservation.objects.exists()
