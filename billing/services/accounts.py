"""Billing accounts: an organization's profile (country, currency, commitment), its credits,
and the card invoices are charged to.

Concurrency: every operation runs concurrently with itself. An account's writes lock its
``BillingAccount`` row, then append (the log's lock); with no row yet, the stream's
``NO_STREAM`` makes the second of two first writes conflict and retry. ``payment_method_set``
and ``card_setup_start`` call Stripe, so they run outside any transaction: each record is its
own short one, and a customer created twice (same idempotency key: the same customer) is
recorded once.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from billing import events as ev
from billing import selectors
from billing.errors import BillingInvalid
from billing.models import BillingAccount
from billing.money import CURRENCY
from billing.stripe_gateway import PaymentGateway, gateway
from events import store
from events.store import NO_STREAM
from events.types import DomainEvent
from neocloud.core.transactions import atomic_with_retry, row_lock
from tenants.access import Action, Actor
from tenants.models import Organization

COUNTRY = re.compile(r"^[A-Z]{2}$")


def _account_append(
    actor: Actor, organization: Organization, events: Sequence[DomainEvent]
) -> None:
    account = row_lock(BillingAccount.objects.all()).filter(organization=organization).first()
    if account is None:
        country, currency, _ = selectors.account_terms(organization.pk)
        # The defaults become events, so a replay never depends on today's settings.
        events = [
            ev.BillingProfileSet(
                organization_id=organization.pk,
                billing_country=country,
                currency=currency,
                minimum_commitment_minor=0,
            ),
            *events,
        ]
    store.append(
        ev.ACCOUNT_STREAM,
        str(organization.pk),
        events,
        expected_version=account.version if account else NO_STREAM,
        metadata=actor.metadata(organization.pk),
    )


def account_profile_set(
    *,
    actor: Actor,
    organization: Organization,
    billing_country: str,
    currency: str,
    minimum_commitment_minor: int = 0,
) -> BillingAccount:
    """Operators set where an organization is billed (its tax), in which currency, and its
    minimum monthly commitment."""
    actor.require(Action.BILLING_OPERATE)
    problems: dict[str, list[str]] = {}
    if not COUNTRY.match(billing_country):
        problems["billing_country"] = ["an ISO 3166-1 alpha-2 code such as DE"]
    if not CURRENCY.match(currency):
        problems["currency"] = ["an ISO 4217 code such as USD"]
    if minimum_commitment_minor < 0:
        problems["minimum_commitment_minor"] = ["not negative"]
    if problems:
        raise BillingInvalid("billing profile is not valid", fields=problems)
    _account_append(
        actor,
        organization,
        [
            ev.BillingProfileSet(
                organization_id=organization.pk,
                billing_country=billing_country,
                currency=currency,
                minimum_commitment_minor=minimum_commitment_minor,
            )
        ],
    )
    return BillingAccount.objects.get(organization=organization)


def credit_grant(
    *,
    actor: Actor,
    organization: Organization,
    kind: str,
    amount_minor: int,
    currency: str,
    reason: str = "",
) -> uuid.UUID:
    """Operators grant promotional credit (a discount) or record prepaid credit (money paid
    in advance); invoices use them oldest first (``rating``)."""
    actor.require(Action.BILLING_OPERATE)
    if kind not in {"promotional", "prepaid"}:
        raise BillingInvalid("kind is promotional or prepaid", fields={"kind": ["unknown"]})
    if amount_minor <= 0:
        raise BillingInvalid("a credit is positive", fields={"amount_minor": ["positive"]})
    if not CURRENCY.match(currency):
        raise BillingInvalid("an ISO 4217 currency", fields={"currency": ["invalid"]})
    credit_id = uuid.uuid4()
    _account_append(
        actor,
        organization,
        [
            ev.CreditGranted(
                credit_id=credit_id,
                kind=kind,
                amount_minor=amount_minor,
                currency=currency,
                reason=reason,
            )
        ],
    )
    return credit_id


def payment_method_set(
    *,
    actor: Actor,
    organization: Organization,
    payment_method_id: str,
    pay: PaymentGateway | None = None,
) -> BillingAccount:
    """Attach a card (a Stripe PaymentMethod made by Stripe.js) to the organization's Stripe
    customer, created on first use, and make it the one invoices are charged to.

    Calls Stripe, so it runs outside a transaction; each record is its own short one."""
    actor.require(Action.INVOICE_PAY, organization)
    pay = pay or gateway()
    customer_id = _stripe_customer(actor, organization, pay)
    card = pay.payment_method_attach(customer_id=customer_id, payment_method_id=payment_method_id)
    atomic_with_retry(
        _account_record,
        actor=actor,
        organization=organization,
        event=ev.PaymentMethodSet(
            payment_method_id=card.payment_method_id, brand=card.brand, last4=card.last4
        ),
    )
    return BillingAccount.objects.get(organization=organization)


def card_setup_start(
    *, actor: Actor, organization: Organization, pay: PaymentGateway | None = None
) -> str:
    """Begin Stripe's own card flow: a SetupIntent for the organization's Stripe customer
    (created on first use), whose client secret Stripe.js confirms the card with in the
    browser, so card numbers never reach us; the PaymentMethod it makes is then set with
    ``payment_method_set``.

    Calls Stripe, so it runs outside a transaction, like ``payment_method_set``."""
    actor.require(Action.INVOICE_PAY, organization)
    pay = pay or gateway()
    return pay.setup_intent_create(customer_id=_stripe_customer(actor, organization, pay))


def _stripe_customer(actor: Actor, organization: Organization, pay: PaymentGateway) -> str:
    """The organization's Stripe customer, created and recorded on first use."""
    account = BillingAccount.objects.filter(organization=organization).first()
    if account is not None and account.stripe_customer_id:
        return account.stripe_customer_id
    customer_id = pay.customer_create(
        organization_id=organization.pk, email=organization.billing_email, name=organization.name
    )
    atomic_with_retry(
        _account_record,
        actor=actor,
        organization=organization,
        event=ev.StripeCustomerCreated(customer_id=customer_id),
    )
    return customer_id


def _account_record(*, actor: Actor, organization: Organization, event: DomainEvent) -> None:
    if isinstance(event, ev.StripeCustomerCreated):
        account = BillingAccount.objects.filter(organization=organization).first()
        if account is not None and account.stripe_customer_id:
            return  # a concurrent call created it first (same idempotency key: same customer)
    _account_append(actor, organization, [event])
