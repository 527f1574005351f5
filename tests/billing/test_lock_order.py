"""Billing keeps the lock order of ``neocloud.core.transactions``: a transaction that waits for a
row does not hold the log's append lock meanwhile (else a writer holding that row and
waiting to append deadlocks with it)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from billing import services
from billing.models import BillingAccount, CreditGrant, Invoice, InvoiceStatus
from neocloud.core.transactions import atomic_with_retry, row_lock
from tests.billing.conftest import History
from tests.billing.test_invoices import at, close, only_invoice
from tests.billing.test_stripe import attach, pay
from tests.builders import SYSTEM
from tests.builders import commerce as commerce_builders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _waiting_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def _append_lock_holders() -> int:
    """Backends of this database holding ``events_append_lock()`` (key 7954886789631538532,
    which pg_locks shows as its two halves)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = 1852141411 AND objid = 1819243876 AND objsubid = 1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return int(cursor.fetchone()[0])


def test_a_credit_note_on_a_paid_invoice_waits_for_the_account_before_it_appends(
    localstripe: str, customer: commerce_builders.Customer, history: History
) -> None:
    history.run(at(3), at(3, 4))
    close()
    invoice = only_invoice(customer)
    attach(customer, "pm_card_visa")
    pay(customer, invoice)
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.PAID
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_the_account() -> None:
        try:
            with transaction.atomic():
                row_lock(BillingAccount.objects.filter(organization=customer.organization)).get()
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    def credit_note() -> None:
        try:
            atomic_with_retry(
                services.credit_note_issue,
                actor=SYSTEM,
                invoice=invoice,
                amount_minor=100,
                reason="goodwill",
            )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_account)
    holder.start()
    assert holding.wait(5)
    writer = threading.Thread(target=credit_note)
    writer.start()
    deadline = time.monotonic() + 5
    while _waiting_backends() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    blocked_holding_the_append_lock = _append_lock_holders()
    release.set()
    holder.join()
    writer.join()

    assert blocked_holding_the_append_lock == 0
    assert errors == []
    assert list(
        CreditGrant.objects.filter(organization=customer.organization).values_list(
            "kind", "amount_minor"
        )
    ) == [("prepaid", 100)]
