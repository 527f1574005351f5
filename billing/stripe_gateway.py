"""Payments through Stripe, with the official SDK only.

We collect our own invoices with one PaymentIntent per collection attempt (``confirm`` and
``off_session`` with the customer's saved card), rather than mirroring them as Stripe
invoices: our invoices are event-sourced and carry our own rating, credits and tax, and a
Stripe invoice would be a second copy to keep equal. Every call carries an idempotency key
derived from what it does (``invoice/<id>/attempt/<n>``), so a retry after a timeout or a
crash gets the same PaymentIntent instead of a second charge; the SDK retries network errors
itself (``STRIPE_MAX_NETWORK_RETRIES``).

Where: ``STRIPE_API_BASE`` (e.g. a localstripe the test command started) or
``STRIPE_MOCK_URL`` (stripe-mock), else Stripe itself, with ``STRIPE_API_KEY``. Payments are
simulated in process only where the settings allow it (``STRIPE_SIMULATED``: the embedded
default with no Stripe setting); anywhere else the settings refuse to start without Stripe.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import stripe
from django.conf import settings

from billing import hooks
from billing.errors import PaymentMethodDeclined, PaymentMethodInvalid, PaymentProviderUnavailable

SIMULATED_DECLINES = ("pm_card_chargeCustomerFail", "pm_card_visa_chargeDeclined")


@dataclass(frozen=True)
class Card:
    payment_method_id: str
    brand: str
    last4: str


@dataclass(frozen=True)
class ChargeOutcome:
    """``succeeded``, ``failed`` or ``processing`` (the webhook will tell)."""

    status: str
    payment_intent_id: str
    code: str = ""
    message: str = ""


class PaymentGateway(Protocol):
    def customer_create(self, *, organization_id: uuid.UUID, email: str, name: str) -> str: ...

    def setup_intent_create(self, *, customer_id: str) -> str: ...

    def payment_method_attach(self, *, customer_id: str, payment_method_id: str) -> Card: ...

    def charge(
        self,
        *,
        customer_id: str,
        payment_method_id: str,
        amount_minor: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ChargeOutcome: ...


class StripeGateway:
    def __init__(self, api_key: str, api_base: str | None, max_network_retries: int) -> None:
        self.client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base} if api_base else {},
            max_network_retries=max_network_retries,
        )

    def customer_create(self, *, organization_id: uuid.UUID, email: str, name: str) -> str:
        customer = self._call(
            self.client.v1.customers.create,
            params={
                "email": email,
                "name": name,
                "metadata": {"organization_id": str(organization_id)},
            },
            options={"idempotency_key": f"customer/{organization_id}"},
        )
        return str(customer.id)

    def setup_intent_create(self, *, customer_id: str) -> str:
        """A SetupIntent for the customer's next card, saved for payments made without them
        (``off_session``); its client secret is what Stripe.js confirms the card with. No
        idempotency key: each visit to the card form gets its own, unused ones expire."""
        intent = self._call(
            self.client.v1.setup_intents.create,
            params={"customer": customer_id, "usage": "off_session"},
        )
        return str(intent.client_secret)

    def payment_method_attach(self, *, customer_id: str, payment_method_id: str) -> Card:
        try:
            method = self._call(
                self.client.v1.payment_methods.attach,
                payment_method_id,
                params={"customer": customer_id},
                options={"idempotency_key": f"attach/{customer_id}/{payment_method_id}"},
            )
        except stripe.CardError as exc:
            raise PaymentMethodDeclined(
                exc.user_message or "the card was declined", details={"decline_code": exc.code}
            ) from exc
        except stripe.InvalidRequestError as exc:
            raise PaymentMethodInvalid(
                exc.user_message or "no such payment method",
                fields={"payment_method": [exc.user_message or "unknown"]},
            ) from exc
        card = method.to_dict().get("card") or {}
        self._call(
            self.client.v1.customers.update,
            customer_id,
            params={"invoice_settings": {"default_payment_method": method.id}},
            options={"idempotency_key": f"default/{customer_id}/{method.id}"},
        )
        return Card(str(method.id), str(card.get("brand", "")), str(card.get("last4", "")))

    def charge(
        self,
        *,
        customer_id: str,
        payment_method_id: str,
        amount_minor: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ChargeOutcome:
        try:
            intent = self._call(
                self.client.v1.payment_intents.create,
                params={
                    "amount": amount_minor,
                    "currency": currency.lower(),
                    "customer": customer_id,
                    "payment_method": payment_method_id,
                    "confirm": True,
                    "off_session": True,
                    "metadata": metadata,
                },
                options={"idempotency_key": idempotency_key},
            )
        except stripe.CardError as exc:
            error: Any = exc.error
            intent_id = getattr(error, "payment_intent", None) if error else None
            return ChargeOutcome(
                status="failed",
                payment_intent_id=str(intent_id.id if intent_id is not None else ""),
                code=exc.code or "card_declined",
                message=exc.user_message or "the card was declined",
            )
        status = str(intent.status)
        if status == "succeeded":
            return ChargeOutcome("succeeded", str(intent.id))
        if status in {"processing", "requires_capture"}:
            return ChargeOutcome("processing", str(intent.id))
        last = intent.to_dict().get("last_payment_error") or {}
        return ChargeOutcome(
            "failed",
            str(intent.id),
            code=str(last.get("code") or status),
            message=str(last.get("message") or f"payment {status}"),
        )

    @staticmethod
    def _call(method: Any, *args: Any, **kwargs: Any) -> Any:
        """Network failures (after the SDK's retries) become a retryable error of ours."""
        began, outcome = time.monotonic(), "ok"
        try:
            return method(*args, **kwargs)
        except (stripe.APIConnectionError, stripe.RateLimitError) as exc:
            outcome = type(exc).__name__
            raise PaymentProviderUnavailable(f"Stripe is unreachable: {exc}") from exc
        except stripe.APIError as exc:
            outcome = type(exc).__name__
            raise PaymentProviderUnavailable(f"Stripe failed: {exc}") from exc
        except stripe.StripeError as exc:  # a decline or bad request: the caller tells them apart
            outcome = type(exc).__name__
            raise
        finally:
            hooks.stripe_called.call_all(
                getattr(method, "__qualname__", "unknown"), outcome, time.monotonic() - began
            )


class SimulatedGateway:
    """The embedded default's payments: every card works but Stripe's declining test cards."""

    def customer_create(self, *, organization_id: uuid.UUID, email: str, name: str) -> str:
        return f"cus_sim_{organization_id.hex[:16]}"

    def setup_intent_create(self, *, customer_id: str) -> str:
        return f"seti_sim_{uuid.uuid4().hex[:16]}_secret_simulated"

    def payment_method_attach(self, *, customer_id: str, payment_method_id: str) -> Card:
        if payment_method_id == "pm_card_visa_chargeDeclined":
            raise PaymentMethodDeclined("the card was declined")
        return Card(payment_method_id, "visa", "4242")

    def charge(
        self,
        *,
        customer_id: str,
        payment_method_id: str,
        amount_minor: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
    ) -> ChargeOutcome:
        intent = "pi_sim_" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:20]
        if payment_method_id in SIMULATED_DECLINES:
            return ChargeOutcome("failed", intent, "card_declined", "the card was declined")
        return ChargeOutcome("succeeded", intent)


def gateway() -> PaymentGateway:
    """Stripe; the simulation only on the embedded default without Stripe settings."""
    if settings.STRIPE_SIMULATED:
        return SimulatedGateway()
    return StripeGateway(
        settings.STRIPE_API_KEY,
        settings.STRIPE_API_BASE or settings.STRIPE_MOCK_URL or None,
        settings.STRIPE_MAX_NETWORK_RETRIES,
    )


def webhook_event(payload: bytes, signature: str) -> dict[str, Any]:
    """The event as plain data, if ``STRIPE_WEBHOOK_SECRET`` signed it (raises otherwise;
    without a secret, as in the simulation, the SDK verifies nothing)."""
    event = stripe.Webhook.construct_event(payload, signature, settings.STRIPE_WEBHOOK_SECRET)
    data: dict[str, Any] = event.to_dict()
    return data
