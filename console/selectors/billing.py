"""Billing's pages: invoices, the card on file, credits and budgets, read through the API's
scoping (``Console.scoped`` / ``Console.one``) and billing's and metering's selectors.
Amounts are formatted here, in each invoice's currency, so templates only show them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Sum

from billing import selectors as billing
from billing.models import OPEN_STATUSES, BillingAccount, Invoice, InvoicePayment
from billing.money import Money
from console.guard import Console
from metering.intervals import MILLI_GPU_SECONDS_PER_GPU_HOUR, month_of
from metering.models import Budget, BudgetAlert
from metering.selectors import budgets_month_usage
from tenants.access import Action
from tenants.models import Project


def money(currency: str, minor: int) -> str:
    return Money(currency, minor).format()


def gpu_hours(milli_gpu_seconds: int) -> Decimal:
    return (Decimal(milli_gpu_seconds) / MILLI_GPU_SECONDS_PER_GPU_HOUR).quantize(Decimal("0.001"))


@dataclass(frozen=True)
class InvoiceRow:
    invoice: Invoice
    total: str
    due: str


def invoices(console: Console) -> list[InvoiceRow]:
    """The current organization's invoices, newest period first."""
    rows = console.scoped(Invoice.objects.all(), Action.INVOICE_READ).order_by("-period", "number")
    return [
        InvoiceRow(
            invoice=invoice,
            total=money(invoice.currency, invoice.total_minor),
            due=money(invoice.currency, invoice.amount_due_minor),
        )
        for invoice in rows
    ]


@dataclass(frozen=True)
class InvoiceDetail:
    invoice: Invoice
    total: str
    due: str
    payments: list[tuple[InvoicePayment, str]]  # each attempt, with its amount formatted
    card: BillingAccount | None  # of the invoice's organization, when a card is on file
    can_pay: bool  # the member may pay it (owners, billing)
    payable: bool  # issued, unsettled, something due

    @property
    def last_payment(self) -> InvoicePayment | None:
        return self.payments[-1][0] if self.payments else None


def invoice(console: Console, pk: object) -> InvoiceDetail:
    """One invoice of any of the member's organizations where they may read invoices (else a
    404, as the API answers), with what paying it needs."""
    found = console.one(
        Invoice.objects.select_related("organization").prefetch_related("payments"),
        Action.INVOICE_READ,
        pk,
    )
    account = BillingAccount.objects.filter(organization_id=found.organization_id).first()
    return InvoiceDetail(
        invoice=found,
        total=money(found.currency, found.total_minor),
        due=money(found.currency, found.amount_due_minor),
        payments=[(p, money(found.currency, p.amount_minor)) for p in found.payments.all()],
        card=account if account is not None and account.payment_method_id else None,
        can_pay=console.actor.allowed(Action.INVOICE_PAY, found.organization),
        payable=found.status in OPEN_STATUSES and found.amount_due_minor > 0,
    )


def account(console: Console) -> BillingAccount | None:
    """The current organization's billing profile and card on file (None: the defaults)."""
    return console.scoped(BillingAccount.objects.all(), Action.INVOICE_READ).first()


@dataclass(frozen=True)
class CreditRow:
    kind: str
    remaining: str


def credits(console: Console) -> list[CreditRow]:
    """Credits with something left, in the order invoices use them."""
    if not console.can(Action.INVOICE_READ):
        return []
    assert console.organization is not None  # noqa: S101 - can() needs one
    return [
        CreditRow(kind=credit.kind, remaining=money(credit.currency, credit.remaining_minor))
        for credit in billing.credits_available(console.organization.pk)
    ]


@dataclass(frozen=True)
class OpenInvoices:
    count: int
    totals: list[str]  # what is due, per currency


def open_invoices(console: Console) -> OpenInvoices:
    """Issued and unsettled invoices of the current organization: how many, and what is
    still due (total less credit notes and payments), in one aggregate."""
    per_currency = (
        console.scoped(Invoice.objects.all(), Action.INVOICE_READ)
        .filter(status__in=OPEN_STATUSES)
        .values("currency")
        .annotate(
            n=Count("id"),
            total=Sum("total_minor"),
            credited=Sum("credited_minor"),
            paid=Sum("paid_minor"),
        )
        .order_by("currency")
    )
    count, totals = 0, []
    for row in per_currency:
        count += row["n"]
        totals.append(money(row["currency"], row["total"] - row["credited"] - row["paid"]))
    return OpenInvoices(count=count, totals=totals)


@dataclass(frozen=True)
class BudgetRow:
    budget: Budget
    scope: str  # the organization, or the project's name
    used: Decimal  # GPU-hours this UTC month so far
    limit: Decimal  # GPU-hours
    percent: int
    alerts: list[int]  # thresholds recorded as reached this month (50, 80, 100)

    @property
    def stopping(self) -> bool:
        """A spent hard stop: new work of the organization is refused."""
        return self.budget.hard_stop and self.percent >= 100


def budgets(console: Console, now: datetime) -> list[BudgetRow]:
    """The current organization's budgets (the API's ``ORDER_READ`` scoping), each with this
    month's usage and the alerts recorded for it, in a fixed number of queries."""
    rows = list(
        console.scoped(Budget.objects.all(), Action.ORDER_READ).order_by("project_id", "updated_at")
    )
    if not rows:
        return []
    used = budgets_month_usage(rows, now)
    month = month_of(now)[0].strftime("%Y-%m")
    reached: dict[object, list[int]] = defaultdict(list)
    for budget_id, threshold in (
        console.scoped(BudgetAlert.objects.all(), Action.ORDER_READ)
        .filter(month=month, budget_id__in=[b.id for b in rows])
        .order_by("threshold_percent")
        .values_list("budget_id", "threshold_percent")
    ):
        reached[budget_id].append(threshold)
    projects = dict(
        Project.objects.filter(pk__in=[b.project_id for b in rows if b.project_id]).values_list(
            "pk", "name"
        )
    )
    return [
        BudgetRow(
            budget=budget,
            scope=projects.get(budget.project_id, "?") if budget.project_id else "Organization",
            used=gpu_hours(used[budget.id]),
            limit=gpu_hours(budget.limit_milli_gpu_seconds),
            percent=used[budget.id] * 100 // budget.limit_milli_gpu_seconds,
            alerts=reached[budget.id],
        )
        for budget in rows
    ]


def spent_month_to_date(console: Console, now: datetime) -> list[str] | None:
    """What the current organization's usage and reservations cost this month so far, per
    currency, priced as its invoice will be (``billing.selectors.charges_month_to_date``);
    None while some usage has no price."""
    assert console.organization is not None  # noqa: S101 - the overview checks
    spent = billing.charges_month_to_date(console.organization.pk, now)
    if spent is None:
        return None
    return [money(currency, minor) for currency, minor in spent.items()]
