"""The operators' dunning page (``/operator/dunning``): an invoice whose payment failed lists
its organization, retrying; a customer gets a 404."""

from __future__ import annotations

import pytest
from django.test import Client

from billing.models import Invoice
from tenants.models import Membership
from tests.billing.test_stripe import attach, invoice, pay
from tests.builders import Builder
from tests.builders import commerce as commerce_builders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
__all__ = ["invoice"]  # the fixture, for this module's tests


def test_a_failed_payment_puts_the_organization_on_the_dunning_page(
    build: Builder, customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    operator = Client()
    operator.force_login(build.user("ops@neocloud.test", is_staff=True))
    assert "No organization is in dunning." in operator.get("/operator/dunning").content.decode()

    attach(customer, "pm_card_chargeCustomerFail")
    pay(customer, invoice)

    page = operator.get("/operator/dunning").content.decode()
    invoice.refresh_from_db()
    assert invoice.payment_failures == 1
    row = page[page.index(f'data-organization="{customer.organization.slug}"') :]
    assert invoice.number in row.split("</tr>")[0]
    assert "<td>1</td>" in row.split("</tr>")[0]
    assert "retrying" in row.split("</tr>")[0]
    owner = Client()
    owner.force_login(Membership.objects.get(organization=customer.organization, role="owner").user)
    assert owner.get("/operator/dunning").status_code == 404
