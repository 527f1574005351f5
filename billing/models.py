"""Billing tables.

Invoices, their lines and payments, credit notes, billing accounts and credits are
projections of the billing streams (``projections.py``) and are rebuilt by ``replay``. Tax
rates, default GPU prices and SLA definitions are operators' settings, edited in the admin and
read when an invoice is drafted; the drafted invoice records what it used (rate, unit price),
so changing a setting never changes an invoice already drafted.
"""

from __future__ import annotations

from django.db import models

from tenants.models import Organization, TenantPath

PLANS = [("on_demand", "on_demand"), ("preemptible", "preemptible"), ("reserved", "reserved")]


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft"
    FINALIZED = "finalized"  # issued, awaiting payment; its lines never change again
    PAID = "paid"
    UNCOLLECTIBLE = "uncollectible"
    VOID = "void"
    REFUNDED = "refunded"  # paid, then refunded in full (a credit note for each refund)
    DISPUTED = "disputed"  # paid, then disputed: the bank holds the money until it is closed


# Issued and not settled: what an organization owes.
OPEN_STATUSES = (InvoiceStatus.FINALIZED, InvoiceStatus.UNCOLLECTIBLE)
# News of a charge no longer pays an invoice in these: it was paid (then perhaps refunded or
# disputed) or voided. A lost dispute opens the invoice again (``FINALIZED``).
PAYMENT_CLOSED_STATUSES = (
    InvoiceStatus.PAID,
    InvoiceStatus.VOID,
    InvoiceStatus.REFUNDED,
    InvoiceStatus.DISPUTED,
)


class DisputeStatus(models.TextChoices):
    """The last dispute of an invoice's payment, as far as it changes what is owed."""

    NONE = "", "none"
    OPEN = "open"
    WON = "won"  # the money came back: paid again
    LOST = "lost"  # the money went to the customer: owed again, dunning resumes


class BillingAccount(models.Model):
    """An organization's billing profile and its Stripe customer (no row: the defaults,
    ``BILLING_DEFAULT_COUNTRY`` / ``BILLING_DEFAULT_CURRENCY``, no commitment)."""

    organization = models.OneToOneField(Organization, on_delete=models.CASCADE, primary_key=True)
    billing_country = models.CharField(max_length=2)
    currency = models.CharField(max_length=3)
    minimum_commitment_minor = models.PositiveBigIntegerField(default=0)
    stripe_customer_id = models.CharField(max_length=64, blank=True)
    payment_method_id = models.CharField(max_length=64, blank=True)
    payment_method_brand = models.CharField(max_length=32, blank=True)
    payment_method_last4 = models.CharField(max_length=4, blank=True)
    version = models.PositiveIntegerField()

    tenancy = TenantPath(organization="organization")

    def __str__(self) -> str:
        return f"billing of {self.organization_id}"


class CreditGrant(models.Model):
    """Promotional or prepaid credit; ``remaining_minor`` falls as finalized invoices use it."""

    id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    kind = models.CharField(
        max_length=16, choices=[("promotional", "promotional"), ("prepaid", "prepaid")]
    )
    amount_minor = models.PositiveBigIntegerField()
    remaining_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=300, blank=True)
    granted_at = models.DateTimeField()
    position = models.BigIntegerField(
        help_text="The grant's position in the log: the order credits are used in."
    )

    tenancy = TenantPath(organization="organization")

    class Meta:
        ordering = ["organization", "position"]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount_minor} {self.currency}"


class Invoice(models.Model):
    """One organization's invoice for one calendar month (UTC) in one currency."""

    id = models.UUIDField(primary_key=True)  # derived from (organization, period, currency)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    number = models.CharField(max_length=80, unique=True)
    period = models.CharField(max_length=7)  # YYYY-MM
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    currency = models.CharField(max_length=3)
    billing_country = models.CharField(max_length=2)
    tax_rate_percent = models.DecimalField(max_digits=6, decimal_places=3)
    status = models.CharField(max_length=16, choices=InvoiceStatus.choices)
    status_reason = models.CharField(max_length=500, blank=True)
    subtotal_minor = models.BigIntegerField()
    credits_minor = models.BigIntegerField()
    tax_minor = models.BigIntegerField()
    total_minor = models.BigIntegerField()
    credited_minor = models.BigIntegerField(default=0, help_text="By credit notes.")
    paid_minor = models.BigIntegerField(
        default=0, help_text="Kept: payments less refunds and disputes lost."
    )
    refunded_minor = models.BigIntegerField(default=0, help_text="Refunded through Stripe.")
    disputed_minor = models.BigIntegerField(default=0, help_text="Of the last dispute.")
    dispute_status = models.CharField(
        max_length=8, choices=DisputeStatus.choices, default=DisputeStatus.NONE, blank=True
    )
    payment_attempts = models.PositiveIntegerField(default=0)
    payment_failures = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization")

    class Meta:
        ordering = ["-period", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "period", "currency"],
                name="invoice_per_org_period_currency",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="invoice_due"),
        ]

    def __str__(self) -> str:
        return self.number

    @property
    def amount_due_minor(self) -> int:
        """What is still to collect: the total less credit notes and payments."""
        return max(self.total_minor - self.credited_minor - self.paid_minor, 0)


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=24)
    description = models.CharField(max_length=500)
    amount_minor = models.BigIntegerField()
    source = models.CharField(max_length=300)
    project_id = models.UUIDField(null=True, blank=True)
    offering = models.CharField(max_length=64, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True)
    price_plan = models.CharField(max_length=16, blank=True)
    region = models.CharField(max_length=64, blank=True)
    milli_gpu_seconds = models.BigIntegerField(null=True, blank=True)
    unit_price_minor = models.BigIntegerField(null=True, blank=True)
    allocation_ids = models.JSONField(default=list)

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_position"),
        ]

    def __str__(self) -> str:
        return f"{self.invoice_id} #{self.position}"


class InvoicePayment(models.Model):
    """One collection attempt and its outcome (``pending`` until Stripe answers)."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="payments")
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=16)  # pending | succeeded | failed
    amount_minor = models.BigIntegerField()
    payment_method_id = models.CharField(max_length=64, blank=True)
    payment_intent_id = models.CharField(max_length=64, blank=True)
    refunded_minor = models.BigIntegerField(default=0)
    code = models.CharField(max_length=64, blank=True)
    message = models.CharField(max_length=500, blank=True)
    attempted_at = models.DateTimeField()
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["invoice", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "attempt"], name="one_payment_per_attempt"),
        ]
        # Refunds and disputes name the charge's PaymentIntent, not our invoice.
        indexes = [models.Index(fields=["payment_intent_id"], name="payment_by_intent")]

    def __str__(self) -> str:
        return f"{self.invoice_id} attempt {self.attempt}: {self.status}"


class CreditNote(models.Model):
    id = models.UUIDField(primary_key=True)
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="credit_notes")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    number = models.CharField(max_length=90, unique=True)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=500)
    issued_at = models.DateTimeField()

    tenancy = TenantPath(organization="organization")

    class Meta:
        ordering = ["issued_at"]

    def __str__(self) -> str:
        return self.number


# --- operators' settings (admin) -------------------------------------------------------------


class TaxRate(models.Model):
    """The rate charged to organizations billed in ``country`` (none: no tax)."""

    country = models.CharField(max_length=2, primary_key=True, help_text="ISO 3166-1 alpha-2.")
    rate_percent = models.DecimalField(max_digits=6, decimal_places=3)

    def __str__(self) -> str:
        return f"{self.country}: {self.rate_percent} %"


class DefaultGpuPrice(models.Model):
    """The price of usage that came from no offering (workloads submitted directly), per GPU
    model and plan; a plan without a row is charged at the model's ``on_demand`` price."""

    gpu_model = models.SlugField(max_length=64)
    price_plan = models.CharField(max_length=16, choices=PLANS, default="on_demand")
    price_per_gpu_hour_minor = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["gpu_model", "price_plan"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu_model", "price_plan"], name="default_price_per_model_plan"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.price_plan}"


class SlaDefinition(models.Model):
    """What an offering promises. A month below ``availability_percent`` credits
    ``availability_credit_percent`` of the workload's charge for that month; a provisioning
    longer than ``max_provisioning_s`` credits the GPU time billed before it ran."""

    offering = models.SlugField(max_length=64, primary_key=True)
    availability_percent = models.DecimalField(
        max_digits=6, decimal_places=3, null=True, blank=True
    )
    availability_credit_percent = models.DecimalField(max_digits=6, decimal_places=3, default=10)
    max_provisioning_s = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return self.offering
