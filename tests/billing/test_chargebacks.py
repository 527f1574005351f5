"""Refunds and disputes through Stripe's webhooks, against an invoice paid through the
localstripe the test command started: a refund issues a credit note and turns a fully refunded
invoice ``refunded``; a dispute holds new work back until it closes; a lost one is owed
again and dunning collects it; every delivery counts once, and replay gives the same state."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone

from billing import services
from billing.models import CreditNote, Invoice, InvoicePayment, InvoiceStatus
from events.models import Event
from events.replay import projections_replay
from tenants.models import Role
from tests.billing.conftest import History
from tests.billing.test_invoices import at, close, only_invoice
from tests.billing.test_stripe import attach, deliver, pay, stripe_events
from tests.builders import client_with_key
from tests.builders import commerce as commerce_builders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

AUTH = ("sk_test_neocloud", "")


@pytest.fixture
def paid(
    localstripe: str, customer: commerce_builders.Customer, history: History
) -> tuple[Invoice, str]:
    """A 1,000 invoice paid by card: the invoice and its PaymentIntent."""
    history.run(at(3), at(3, 4))
    close()
    invoice = only_invoice(customer)
    assert attach(customer, "pm_card_visa").status_code == 200
    assert pay(customer, invoice).json()["status"] == "paid"
    invoice.refresh_from_db()
    return invoice, invoice.payments.get().payment_intent_id


def stripe_event(type_: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": type_,
        "created": int(time.time()),
        "data": {"object": obj},
    }


def refunded(localstripe: str, intent: str, amount: int | None = None) -> dict[str, Any]:
    """Refund ``amount`` (all: None) of the PaymentIntent at Stripe; the ``charge.refunded``
    event Stripe sends then, its charge as Stripe answers for it now."""
    data: dict[str, Any] = {"payment_intent": intent}
    if amount is not None:
        data["amount"] = amount
    made = requests.post(f"{localstripe}/v1/refunds", data=data, auth=AUTH, timeout=10)
    assert made.status_code == 200, made.text
    charge = requests.get(
        f"{localstripe}/v1/charges/{made.json()['charge']}", auth=AUTH, timeout=10
    ).json()
    assert charge["payment_intent"] == intent
    return stripe_event("charge.refunded", charge)


def dispute(intent: str, type_: str, status: str, amount: int = 1000) -> dict[str, Any]:
    """A dispute event of the PaymentIntent's charge (localstripe makes no disputes)."""
    return stripe_event(
        type_,
        {
            "id": f"dp_{intent}",
            "object": "dispute",
            "payment_intent": intent,
            "amount": amount,
            "currency": "usd",
            "reason": "fraudulent",
            "status": status,
        },
    )


def invoice_answer(customer: commerce_builders.Customer, invoice: Invoice) -> dict[str, Any]:
    answer: dict[str, Any] = (
        client_with_key(customer.keys[Role.OWNER]).get(f"/api/v1/invoices/{invoice.pk}").json()
    )
    return answer


def test_a_full_refund_refunds_the_invoice_with_a_credit_note_once(
    localstripe: str, customer: commerce_builders.Customer, paid: tuple[Invoice, str]
) -> None:
    invoice, intent = paid
    event = refunded(localstripe, intent)
    foreign = {**event, "id": f"evt_{uuid.uuid4().hex[:24]}"}
    foreign["data"] = {"object": {**event["data"]["object"], "payment_intent": "pi_not_ours"}}
    assert deliver(foreign).json() == {"outcome": "ignored: not a payment of ours"}

    first, again = deliver(event).json(), deliver(event).json()
    # the same refund in another event (Stripe's totals are running totals)
    another = deliver({**event, "id": f"evt_{uuid.uuid4().hex[:24]}"}).json()

    assert (first, again) == ({"outcome": "refunded"}, {"outcome": "duplicate"})
    assert another == {"outcome": "ignored: 1000 already refunded"}
    body = invoice_answer(customer, invoice)
    assert (body["status"], body["paid_minor"], body["refunded_minor"]) == ("refunded", 0, 1000)
    assert (body["credited_minor"], body["amount_due_minor"]) == (1000, 0)
    assert body["payments"][0]["refunded_minor"] == 1000
    (note,) = body["credit_notes"]
    assert (note["number"], note["amount_minor"], note["currency"]) == (
        f"CN-{invoice.number}-1",
        1000,
        "USD",
    )
    assert note["reason"] == f"refunded through Stripe ({intent})"
    assert Event.objects.filter(type="billing.InvoiceRefunded").count() == 1
    page = client_with_key(customer.keys[Role.OWNER]).get(f"/api/v1/invoices/{invoice.pk}/html")
    assert f"Credit note CN-{invoice.number}-1" in page.content.decode()
    assert "<td>Refunded</td>" in page.content.decode()


def test_a_partial_refund_keeps_the_invoice_paid_and_an_older_total_adds_nothing(
    localstripe: str, customer: commerce_builders.Customer, paid: tuple[Invoice, str]
) -> None:
    invoice, intent = paid
    three = refunded(localstripe, intent, 300)
    five = refunded(localstripe, intent, 200)  # the charge's total is now 500

    outcomes = [deliver(e).json()["outcome"] for e in (five, three)]  # out of order

    assert outcomes == ["refunded 500 of 1000", "ignored: 500 already refunded"]
    invoice.refresh_from_db()
    assert (invoice.status, invoice.paid_minor, invoice.refunded_minor) == ("paid", 500, 500)
    assert (invoice.credited_minor, invoice.amount_due_minor) == (500, 0)
    assert list(CreditNote.objects.values_list("amount_minor", flat=True)) == [500]

    # and the rest refunded later turns it refunded, with a second credit note
    assert deliver(refunded(localstripe, intent, 500)).json() == {"outcome": "refunded"}
    invoice.refresh_from_db()
    assert (invoice.status, invoice.paid_minor, invoice.refunded_minor) == ("refunded", 0, 1000)
    assert sorted(CreditNote.objects.values_list("amount_minor", flat=True)) == [500, 500]


def test_a_dispute_holds_new_work_back_until_won(
    customer: commerce_builders.Customer, paid: tuple[Invoice, str]
) -> None:
    invoice, intent = paid

    # when the payment is disputed (and the dispute delivered twice)
    opened = dispute(intent, "charge.dispute.created", "needs_response")
    assert deliver(opened).json() == {"outcome": "disputed"}
    assert deliver(opened).json() == {"outcome": "duplicate"}

    # then the invoice is disputed and the organization's new work is refused
    body = invoice_answer(customer, invoice)
    assert (body["status"], body["dispute_status"], body["disputed_minor"]) == (
        "disputed",
        "open",
        1000,
    )
    refused = customer.post_order(offering="1xh100", price_plan="on_demand")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "payment_required"
    assert refused.json()["error"]["message"] == (
        f"invoice {invoice.number}'s payment is disputed; new work waits until the dispute"
        " is closed"
    )

    # an update is recorded only
    updated = deliver(dispute(intent, "charge.dispute.updated", "under_review")).json()
    assert updated == {"outcome": "recorded: dispute under_review"}
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.DISPUTED

    # when it is won, the invoice is paid again and orders are allowed
    assert deliver(dispute(intent, "charge.dispute.closed", "won")).json() == {
        "outcome": "dispute won"
    }
    invoice.refresh_from_db()
    assert (invoice.status, invoice.dispute_status, invoice.paid_minor) == ("paid", "won", 1000)
    assert invoice.amount_due_minor == 0
    assert customer.post_order(offering="1xh100", price_plan="on_demand").status_code == 201


def test_a_lost_dispute_is_owed_again_and_dunning_collects_it(
    localstripe: str, customer: commerce_builders.Customer, paid: tuple[Invoice, str]
) -> None:
    invoice, intent = paid
    deliver(dispute(intent, "charge.dispute.created", "needs_response"))

    # when the dispute is lost
    assert deliver(dispute(intent, "charge.dispute.closed", "lost")).json() == {
        "outcome": "dispute lost"
    }

    # then the amount is owed again, new work stays refused, and dunning is due
    invoice.refresh_from_db()
    assert (invoice.status, invoice.dispute_status) == (InvoiceStatus.FINALIZED, "lost")
    assert (invoice.paid_minor, invoice.amount_due_minor) == (0, 1000)
    assert invoice.next_attempt_at is not None
    refused = customer.post_order(offering="1xh100", price_plan="on_demand")
    assert refused.json()["error"]["message"] == (
        f"invoice {invoice.number} is unpaid: its payment's dispute was lost; pay it"
    )
    # Stripe's late news of the disputed payment pays nothing again
    (late,) = [e for e in stripe_events(localstripe, invoice) if e["type"].endswith("succeeded")]
    assert deliver(late).json() == {"outcome": "ignored: attempt 1 is succeeded"}
    assert Invoice.objects.get(pk=invoice.pk).paid_minor == 0

    # when dunning's next tick charges the card again, it is paid and orders are allowed
    services.collect_due(now=timezone.now() + timedelta(minutes=1))
    invoice.refresh_from_db()
    assert (invoice.status, invoice.paid_minor, invoice.payment_attempts) == ("paid", 1000, 2)
    assert InvoicePayment.objects.get(invoice=invoice, attempt=2).status == "succeeded"
    assert customer.post_order(offering="1xh100", price_plan="on_demand").status_code == 201


def snapshot() -> list[tuple[object, ...]]:
    return [
        (
            i.number,
            i.status,
            i.paid_minor,
            i.refunded_minor,
            i.credited_minor,
            i.disputed_minor,
            i.dispute_status,
            i.next_attempt_at,
            i.version,
            tuple(i.payments.values_list("attempt", "status", "refunded_minor")),
            tuple(i.credit_notes.values_list("number", "amount_minor")),
        )
        for i in Invoice.objects.order_by("number")
    ]


def test_replay_gives_the_same_refunds_and_disputes(
    localstripe: str, paid: tuple[Invoice, str]
) -> None:
    _, intent = paid
    deliver(refunded(localstripe, intent, 250))
    deliver(dispute(intent, "charge.dispute.created", "needs_response", amount=750))
    deliver(dispute(intent, "charge.dispute.closed", "lost"))
    live = snapshot()

    projections_replay(names=["billing.billing"])

    assert snapshot() == live
    assert live[0][1:7] == ("finalized", 0, 250, 250, 750, "lost")
