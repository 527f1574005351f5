"""Collecting an invoice charges a customer's card: it needs the write scope, from operators
too. A read-only operator key charges nothing."""

from __future__ import annotations

import pytest

from billing import services
from billing.models import Invoice
from events.models import Event
from tenants.access import Actor
from tenants.errors import PermissionDenied
from tenants.models import Membership, Scope
from tests.billing.conftest import History
from tests.billing.test_invoices import at, close, only_invoice
from tests.builders import Builder, client_with_key
from tests.builders import commerce as commerce_builders

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


@pytest.mark.parametrize(
    ("caller", "status"),
    [
        ("owner", 200),
        ("billing", 200),
        ("billing in a session", 200),
        ("admin", 403),
        ("member", 404),
        ("viewer", 404),
        ("owner's read key", 403),
        ("billing's read key", 403),
    ],
)
def test_owners_and_billing_members_pay(
    build: Builder, customer: commerce_builders.Customer, invoice: Invoice, caller: str, status: int
) -> None:
    role, _, how = caller.partition(" ")
    role = role.removesuffix("'s")
    if how == "in a session":
        client = client_with_key(None)
        client.force_authenticate(
            Membership.objects.get(organization=customer.organization, role=role).user
        )
    elif how == "read key":
        user = Membership.objects.filter(organization=customer.organization, role=role)[0].user
        client = client_with_key(build.key(customer.organization, user, [Scope.READ])[1])
    else:
        client = customer.client(role)

    response = client.post(f"/api/v1/invoices/{invoice.pk}/pay")

    assert response.status_code == status
    attempts = Invoice.objects.get(pk=invoice.pk).payment_attempts
    assert attempts == (1 if status == 200 else 0)
