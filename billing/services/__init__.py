"""Billing writes, one module per subject; callers use ``from billing import services``.

- ``accounts``: billing profiles, credits, the card on file;
- ``prices``: default GPU prices (usage from no offering);
- ``closing``: closing a month into invoices (usage, reservations, SLA credits, credits);
- ``corrections``: voiding, writing off, credit notes;
- ``collection``: charging invoices through Stripe, and dunning;
- ``webhooks``: Stripe's webhooks;
- ``invoice_stream``: how the last three lock and append to an issued invoice.

Each module states its lock order. Reads, including the payment check of new work
(``payment_refusal``), are in ``billing.selectors``.
"""

from billing.services.accounts import (
    account_profile_set,
    card_setup_start,
    credit_grant,
    payment_method_set,
)
from billing.services.closing import (
    CloseReport,
    Inputs,
    Period,
    drafts_for,
    invoice_id_for,
    invoices_draft,
    period_close,
)
from billing.services.collection import SYSTEM, collect_due, invoice_collect, payment_settle
from billing.services.corrections import (
    credit_note_issue,
    invoice_mark_uncollectible,
    invoice_void,
)
from billing.services.prices import default_price_set
from billing.services.webhooks import stripe_webhook_receive

__all__ = [
    "SYSTEM",
    "CloseReport",
    "Inputs",
    "Period",
    "account_profile_set",
    "card_setup_start",
    "collect_due",
    "credit_grant",
    "credit_note_issue",
    "default_price_set",
    "drafts_for",
    "invoice_collect",
    "invoice_id_for",
    "invoice_mark_uncollectible",
    "invoice_void",
    "invoices_draft",
    "payment_method_set",
    "payment_settle",
    "period_close",
    "stripe_webhook_receive",
]
