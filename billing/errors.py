"""Errors of billing, each with its stable code."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, NotFound, ValidationFailed


class BillingInvalid(ValidationFailed):
    """A billing profile or credit is wrong as written; ``fields`` says where."""

    code = "billing_invalid"


class InvoiceNotFound(NotFound):
    """No such invoice for this organization."""

    code = "invoice_not_found"


class InvalidInvoiceTransition(ApplicationError):
    """E.g. voiding a paid invoice: finalized invoices only move forward."""

    code = "invalid_transition"
    http_status = 409


class PaymentMethodDeclined(ApplicationError):
    """The card was refused when attached (terminal: another card is needed)."""

    code = "card_declined"
    http_status = 402


class PaymentMethodInvalid(ValidationFailed):
    """Stripe knows no such PaymentMethod, or refuses it as a request (not a decline)."""

    code = "payment_method_invalid"


class PaymentProviderUnavailable(ApplicationError):
    """Stripe could not be reached after the SDK's retries: try again later."""

    code = "payment_provider_unavailable"
    http_status = 503
    retryable = True


class WebhookSignatureInvalid(ValidationFailed):
    """A webhook delivery whose signature does not verify: refused, not processed."""

    code = "webhook_signature_invalid"


class WebhookConflict(ApplicationError):
    """The delivery kept losing races for the streams it writes and was not processed: a 5xx,
    so that Stripe delivers it again (a 2xx would lose it)."""

    code = "webhook_conflict"
    http_status = 503
    retryable = True


class PeriodInvalid(ValidationFailed):
    """A billing period is written ``YYYY-MM``."""

    code = "period_invalid"
