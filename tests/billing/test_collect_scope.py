"""Collecting an invoice charges a customer's card: it needs the write scope, from operators
too. A read-only operator key charges nothing."""

from __future__ import annotations

import pytest

from billing import services
from billing.models import Invoice
from events.models import Event
from tenants.access import Actor
from tenants.errors import PermissionDenied
from tenants.models import Scope
from tests import commerce_builders
from tests.billing.conftest import History
from tests.billing.test_invoices import at, close, only_invoice
from tests.builders import Builder

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def invoice(customer: commerce_builders.Customer, history: History) -> Invoice:
    history.run(at(3), at(3, 4))
    close()
    return only_invoice(customer)


def operator(build: Builder, scopes: list[str]) -> Actor:
    user = build.user(is_staff=True)
    api_key, _ = build.key(build.organization("Operators", owner=user), user, scopes)
    return Actor(user=user, api_key=api_key)


def test_a_read_only_operator_key_cannot_collect(build: Builder, invoice: Invoice) -> None:
    read_only = operator(build, [Scope.READ])
    before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        services.invoice_collect(actor=read_only, invoice=invoice)

    assert Event.objects.count() == before
    assert Invoice.objects.get(pk=invoice.pk).payment_attempts == 0


def test_an_operator_write_key_collects(build: Builder, invoice: Invoice) -> None:
    collected = services.invoice_collect(
        actor=operator(build, [Scope.READ, Scope.WRITE]), invoice=invoice
    )

    # No card on file: the attempt is recorded as failed, and nothing is charged.
    assert collected.payment_attempts == 1
    assert [(p.attempt, p.status, p.code) for p in collected.payments.all()] == [
        (1, "failed", "no_payment_method")
    ]
