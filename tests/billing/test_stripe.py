"""Collection through Stripe (the localstripe the test command started): cards that pay and
cards that decline, dunning that suspends new orders until the invoice is paid, and webhooks
verified, processed once, in any order."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone

from billing import services
from billing.models import BillingAccount, Invoice, InvoicePayment, InvoiceStatus
from billing.services import collection, invoice_stream
from billing.stripe_gateway import ChargeOutcome, gateway
from events import store
from events.models import Event
from tenants.models import Role
from tests.billing.conftest import History, signed
from tests.billing.test_invoices import at, close, only_invoice
from tests.builders import client_with_key, run
from tests.builders import commerce as commerce_builders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def invoice(localstripe: str, customer: commerce_builders.Customer, history: History) -> Invoice:
    history.run(at(3), at(3, 4))  # 1,000
    close()
    return only_invoice(customer)


def attach(customer: commerce_builders.Customer, card: str, role: str = Role.OWNER) -> Any:
    return client_with_key(customer.keys[role]).post(
        f"/api/v1/billing-accounts/{customer.organization.pk}/payment-method",
        {"payment_method": card},
        format="json",
    )


def pay(customer: commerce_builders.Customer, invoice: Invoice) -> Any:
    return client_with_key(customer.keys[Role.OWNER]).post(f"/api/v1/invoices/{invoice.pk}/pay")


def test_a_card_that_works_pays_the_invoice(
    customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    attached = attach(customer, "pm_card_visa")
    paid = pay(customer, invoice)

    assert attached.status_code == 200, attached.json()
    assert attached.json()["payment_method_last4"] == "4242"
    body = paid.json()
    assert (body["status"], body["paid_minor"], body["amount_due_minor"]) == ("paid", 1000, 0)
    assert body["payments"][0]["status"] == "succeeded"
    assert body["payments"][0]["payment_intent_id"].startswith("pi_")


def test_a_card_declined_when_attached_is_refused(
    customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    refused = attach(customer, "pm_card_visa_chargeDeclined")  # 4000 0000 0000 0002

    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "card_declined"
    assert pay(customer, invoice).json()["payments"][0]["code"] == "no_payment_method"


def test_an_unknown_payment_method_is_bad_input_not_a_decline(
    customer: commerce_builders.Customer,
) -> None:
    refused = attach(customer, "pm_no_such_method")
    malformed = attach(customer, "X-Request-ID")

    for response in (refused, malformed):
        assert response.status_code == 400
        assert list(response.json()["error"]["fields"]) == ["payment_method"]
    assert refused.json()["error"]["code"] == "payment_method_invalid"
    assert malformed.json()["error"]["code"] == "invalid"
    assert not Event.objects.filter(type="billing.PaymentMethodSet").exists()


def test_members_and_viewers_cannot_pay(
    customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    assert attach(customer, "pm_card_visa", Role.MEMBER).status_code == 403
    assert attach(customer, "pm_card_visa", Role.VIEWER).status_code == 403
    member = client_with_key(customer.keys[Role.MEMBER]).post(f"/api/v1/invoices/{invoice.pk}/pay")
    assert member.status_code == 404


def test_decline_dunning_suspends_new_orders_until_paid(
    customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    # given a card that attaches but whose charges are declined (4000 0000 0000 0341)
    assert attach(customer, "pm_card_chargeCustomerFail").status_code == 200
    now = timezone.now()

    # when the first attempt and the two retries of dunning fail
    first = pay(customer, invoice).json()
    services.collect_due(now=now + timedelta(days=1, minutes=1))
    services.collect_due(now=now + timedelta(days=3, minutes=2))
    invoice.refresh_from_db()

    # then it was retried with backoff, then stopped, and new orders are refused
    assert first["payments"][0]["code"] == "card_declined"
    assert first["next_attempt_at"] is not None
    assert (invoice.payment_failures, invoice.next_attempt_at) == (3, None)
    refused = customer.post_order(offering="1xh100", price_plan="on_demand")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "payment_required"
    assert invoice.number in refused.json()["error"]["message"]

    # when the customer sets a card that works and pays
    assert attach(customer, "pm_card_visa").status_code == 200
    assert pay(customer, invoice).json()["status"] == "paid"

    # then orders are allowed again
    assert customer.post_order(offering="1xh100", price_plan="on_demand").status_code == 201


def stripe_events(localstripe: str, invoice: Invoice) -> list[dict[str, Any]]:
    """The PaymentIntent events localstripe recorded for this invoice, oldest first."""
    listed = requests.get(
        f"{localstripe}/v1/events", params={"limit": 100}, auth=("sk_test_neocloud", ""), timeout=10
    ).json()["data"]
    mine = [
        e
        for e in listed
        if e["type"].startswith("payment_intent.")
        and e["data"]["object"].get("metadata", {}).get("invoice_id") == str(invoice.pk)
    ]
    return sorted(mine, key=lambda e: int(e["data"]["object"]["metadata"]["attempt"]))


def deliver(event: dict[str, Any], secret: str | None = None) -> Any:
    payload, signature = signed(event) if secret is None else signed(event, secret)
    return client_with_key(None).post(
        "/api/v1/webhooks/stripe",
        payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=signature,
    )


def test_webhooks_replayed_duplicated_and_out_of_order_change_nothing(
    localstripe: str, customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    attach(customer, "pm_card_chargeCustomerFail")
    pay(customer, invoice)
    attach(customer, "pm_card_visa")
    pay(customer, invoice)
    failed, succeeded = stripe_events(localstripe, invoice)
    invoice.refresh_from_db()
    before = (Invoice.objects.get(pk=invoice.pk).version, invoice.status, invoice.payment_failures)

    # the same events again (the charges' answers were recorded first), in reverse order, twice
    outcomes = [deliver(e).json()["outcome"] for e in (succeeded, failed, succeeded, failed)]

    invoice.refresh_from_db()
    assert outcomes == [
        "ignored: invoice is paid",
        "ignored: invoice is paid",
        "duplicate",
        "duplicate",
    ]
    assert (invoice.version, invoice.status, invoice.payment_failures) == before
    assert Event.objects.filter(type="billing.StripeEventProcessed").count() == 2


def charge(
    customer: commerce_builders.Customer, payment: InvoicePayment, idempotency_key: str
) -> ChargeOutcome:
    """A PaymentIntent for ``payment``'s attempt, made at Stripe the way collection makes it."""
    return gateway().charge(
        customer_id=BillingAccount.objects.get(
            organization=customer.organization
        ).stripe_customer_id,
        payment_method_id=payment.payment_method_id,
        amount_minor=payment.amount_minor,
        currency="USD",
        idempotency_key=idempotency_key,
        metadata={"invoice_id": str(payment.invoice_id), "attempt": str(payment.attempt)},
    )


def succeeded_event(localstripe: str, invoice: Invoice, intent_id: str) -> dict[str, Any]:
    (event,) = [
        e
        for e in stripe_events(localstripe, invoice)
        if e["type"] == "payment_intent.succeeded" and e["data"]["object"]["id"] == intent_id
    ]
    return event


@pytest.fixture
def processing(
    customer: commerce_builders.Customer, invoice: Invoice
) -> tuple[InvoicePayment, ChargeOutcome]:
    """An attempt whose charge Stripe answered ``processing``: its PaymentIntent is recorded
    and the webhook will say how it ended (localstripe has already succeeded it)."""
    attach(customer, "pm_card_visa")
    payment = run(collection._attempt_start, invoice_id=invoice.pk)
    assert payment is not None
    answer = charge(customer, payment, collection._idempotency_key(invoice.pk, payment.attempt))
    recorded = ChargeOutcome("processing", answer.payment_intent_id)
    run(services.payment_settle, invoice_id=invoice.pk, attempt=payment.attempt, outcome=recorded)
    payment.refresh_from_db()
    assert (payment.status, payment.payment_intent_id) == ("pending", answer.payment_intent_id)
    return payment, recorded


def test_a_webhook_settles_an_attempt_stripe_answered_processing(
    localstripe: str, invoice: Invoice, processing: tuple[InvoicePayment, ChargeOutcome]
) -> None:
    payment, recorded = processing

    response = deliver(succeeded_event(localstripe, invoice, recorded.payment_intent_id))

    invoice.refresh_from_db()
    assert (response.status_code, response.json()["outcome"]) == (200, "paid")
    assert (invoice.status, invoice.paid_minor) == (InvoiceStatus.PAID, payment.amount_minor)
    assert invoice.payments.get().payment_intent_id == recorded.payment_intent_id


def test_a_payment_intent_other_than_the_attempts_pays_nothing_and_alerts(
    localstripe: str,
    customer: commerce_builders.Customer,
    invoice: Invoice,
    processing: tuple[InvoicePayment, ChargeOutcome],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given another PaymentIntent naming the same invoice and attempt (same amount)
    payment, recorded = processing
    other = charge(customer, payment, "not-the-attempts-key")

    # when its success is delivered
    with caplog.at_level(logging.ERROR, logger="billing.services"):
        response = deliver(succeeded_event(localstripe, invoice, other.payment_intent_id))

    # then nothing is paid, the mismatch is in the invoice's log, and it alerts
    invoice.refresh_from_db()
    assert response.status_code == 200
    assert response.json()["outcome"].startswith("refused: payment intent mismatch")
    assert (invoice.status, invoice.paid_minor) == (InvoiceStatus.FINALIZED, 0)
    (mismatch,) = Event.objects.filter(type="billing.InvoicePaymentMismatched")
    assert (mismatch.stream_type, mismatch.stream_id) == ("invoice", str(invoice.pk))
    assert mismatch.data == {
        "attempt": payment.attempt,
        "payment_intent_id": other.payment_intent_id,
        "amount_minor": payment.amount_minor,
        "currency": "usd",
        "expected_payment_intent_id": recorded.payment_intent_id,
        "expected_amount_minor": payment.amount_minor,
        "expected_currency": "usd",
        "stripe_event_id": mismatch.data["stripe_event_id"],
    }
    (alert,) = [r for r in caplog.records if r.name == "billing.services"]
    assert alert.levelno == logging.ERROR
    assert alert.getMessage().startswith("payment_mismatch ")
    assert f"payment_intent={other.payment_intent_id}" in alert.getMessage()
    assert f"invoice={invoice.number}" in alert.getMessage()

    # and the attempt's own PaymentIntent still pays it
    assert deliver(succeeded_event(localstripe, invoice, recorded.payment_intent_id)).json() == {
        "outcome": "paid"
    }


def test_a_payment_intent_of_another_amount_pays_nothing(
    localstripe: str, invoice: Invoice, processing: tuple[InvoicePayment, ChargeOutcome]
) -> None:
    payment, recorded = processing
    event = succeeded_event(localstripe, invoice, recorded.payment_intent_id)
    event["data"]["object"]["amount"] = payment.amount_minor - 1

    response = deliver(event)

    invoice.refresh_from_db()
    assert response.json()["outcome"].startswith("refused: payment intent mismatch")
    assert (invoice.status, invoice.paid_minor) == (InvoiceStatus.FINALIZED, 0)
    (mismatch,) = Event.objects.filter(type="billing.InvoicePaymentMismatched")
    assert (mismatch.data["amount_minor"], mismatch.data["expected_amount_minor"]) == (
        payment.amount_minor - 1,
        payment.amount_minor,
    )


def test_an_attempt_whose_answer_was_lost_is_settled_by_resuming_it(
    localstripe: str, customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    # given an attempt recorded but whose answer was lost (a crash after Stripe charged)
    attach(customer, "pm_card_visa")
    payment = run(collection._attempt_start, invoice_id=invoice.pk)
    assert payment is not None
    lost = charge(customer, payment, collection._idempotency_key(invoice.pk, payment.attempt))

    # when Stripe's webhook arrives: no PaymentIntent is recorded to match it, nothing is paid
    response = deliver(succeeded_event(localstripe, invoice, lost.payment_intent_id))
    invoice.refresh_from_db()
    assert response.json()["outcome"] == (
        "ignored: attempt 1 has no recorded PaymentIntent yet (collection resumes it)"
    )
    assert invoice.status == InvoiceStatus.FINALIZED

    # then collection resumes the attempt with its key (Stripe answers with the same
    # PaymentIntent; localstripe ignores keys and makes another) and that answer pays
    services.collect_due(now=timezone.now() + timedelta(minutes=11))
    invoice.refresh_from_db()
    assert (invoice.status, invoice.payments.get().status) == (InvoiceStatus.PAID, "succeeded")


def test_a_webhook_that_keeps_losing_its_race_is_answered_so_stripe_retries(
    localstripe: str,
    invoice: Invoice,
    processing: tuple[InvoicePayment, ChargeOutcome],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given an invoice stream that moves under every attempt to settle
    _, recorded = processing
    event = succeeded_event(localstripe, invoice, recorded.payment_intent_id)
    tries = []
    original = invoice_stream.append

    def moved(actor: Any, invoice: Invoice, events: Any) -> None:
        tries.append(invoice.version)
        store.append(
            "invoice",
            str(invoice.pk),
            events,
            expected_version=invoice.version - 1,
            metadata=actor.metadata(invoice.organization_id),
        )

    monkeypatch.setattr(invoice_stream, "append", moved)

    # when the webhook is delivered
    response = deliver(event)

    # then it is a retryable 503 and nothing is recorded, not even the event as processed
    assert len(tries) == 3
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "webhook_conflict"
    assert not Event.objects.filter(type="billing.StripeEventProcessed").exists()
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.FINALIZED

    # and Stripe's retry, once the stream is quiet, pays the invoice
    monkeypatch.setattr(invoice_stream, "append", original)
    assert deliver(event).json() == {"outcome": "paid"}
    assert deliver(event).json() == {"outcome": "duplicate"}


def test_a_bad_signature_is_refused_and_changes_nothing(
    localstripe: str, customer: commerce_builders.Customer, invoice: Invoice
) -> None:
    attach(customer, "pm_card_visa")
    run(collection._attempt_start, invoice_id=invoice.pk)
    event = {
        "id": "evt_forged",
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": 1,
        "data": {
            "object": {
                "id": "pi_forged",
                "object": "payment_intent",
                "metadata": {"invoice_id": str(invoice.pk), "attempt": "1"},
            }
        },
    }
    before = Event.objects.count()

    response = deliver(event, secret="whsec_someone_else")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "webhook_signature_invalid"
    assert Event.objects.count() == before
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.FINALIZED
