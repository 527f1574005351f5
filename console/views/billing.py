"""Billing: invoices, paying them, credits, budgets, payment methods.

The area opens for members who may read invoices (owners, admins, billing). Paying and the
card call Stripe, so their services (``invoice_collect``, ``card_setup_start``,
``payment_method_set``) run their own short transactions around the calls, as they do under
the API: the views call them directly, never inside a transaction.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing import selectors as billing_selectors
from billing import services as billing
from billing.models import Invoice, InvoiceStatus
from console.forms.billing import TEST_CARD, BudgetForm, CardForm
from console.guard import Console, ConsoleRequest, signed_in
from console.selectors import billing as selectors
from metering import services as metering
from metering.models import Budget
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Action


def _opened(console: Console, action: Action = Action.INVOICE_READ) -> Console:
    """The billing area's pages are the current organization's, for who may read invoices."""
    if not console.can(action):
        raise PermissionDenied
    return console


@require_GET
@signed_in
def index(request: ConsoleRequest) -> HttpResponse:
    console = _opened(request.console)
    assert console.organization is not None  # noqa: S101 - can() needs one
    return render(
        request,
        "console/billing/index.html",
        {
            "invoices": selectors.invoices(console),
            "account": selectors.account(console),
            "credits": selectors.credits(console),
            "payment_problem": billing_selectors.payment_refusal(console.organization),
            "can_pay": console.can(Action.INVOICE_PAY),
        },
    )


def _invoice_page(
    request: ConsoleRequest, pk: object, *, error: str = "", status: int = 200
) -> HttpResponse:
    return render(
        request,
        "console/billing/invoice.html",
        {"detail": selectors.invoice(request.console, pk), "error": error},
        status=status,
    )


@require_GET
@signed_in
def invoice(request: ConsoleRequest, pk: str) -> HttpResponse:
    return _invoice_page(request, pk)


@require_GET
@xframe_options_sameorigin
@signed_in
def invoice_document(request: ConsoleRequest, pk: str) -> HttpResponse:
    """The invoice's own printable page (the API's ``/invoices/{id}/html``), framed by the
    invoice's console page."""
    found = request.console.one(Invoice.objects.all(), Action.INVOICE_READ, pk)
    page = render_to_string("billing/invoice.html", billing_selectors.invoice_page(found))
    return HttpResponse(page, content_type="text/html; charset=utf-8")


@require_POST
@signed_in
def invoice_pay(request: ConsoleRequest, pk: str) -> HttpResponse:
    """Charge what is due on the card on file, as ``POST /invoices/{id}/pay`` does: a
    declined card is a failed attempt, shown on the page."""
    found = request.console.one(Invoice.objects.all(), Action.INVOICE_READ, pk)
    try:
        paid = billing.invoice_collect(actor=request.console.actor, invoice=found)
    except ApplicationError as error:
        return _invoice_page(request, pk, error=error.message, status=error.http_status)
    if paid.status == InvoiceStatus.PAID:
        messages.success(request, f"Invoice {paid.number} is paid.")
    else:
        last = paid.payments.order_by("attempt").last()
        reason = last.message if last is not None else "nothing was charged"
        messages.error(request, f"Invoice {paid.number} is not paid: {reason}.")
    return redirect("console:invoice", pk=found.pk)


def _card_page(
    request: ConsoleRequest, console: Console, *, form: CardForm, error: str = "", status: int = 200
) -> HttpResponse:
    """The card form: Stripe.js and a SetupIntent where Stripe is configured for it, the test
    card where payments are simulated (the embedded default)."""
    assert console.organization is not None  # noqa: S101 - _opened made sure
    context: dict[str, Any] = {
        "form": form,
        "error": error,
        "account": selectors.account(console),
        "simulated": settings.STRIPE_SIMULATED,
        "test_card": TEST_CARD,
        "next": _next(request),
    }
    if not settings.STRIPE_SIMULATED and settings.STRIPE_PUBLISHABLE_KEY:
        try:
            context["client_secret"] = billing.card_setup_start(
                actor=console.actor, organization=console.organization
            )
        except ApplicationError as failed:
            context["error"], status = failed.message, failed.http_status
        context["stripe_js"] = settings.STRIPE_JS_URL
        context["publishable_key"] = settings.STRIPE_PUBLISHABLE_KEY
    return render(request, "console/billing/card.html", context, status=status)


def _next(request: ConsoleRequest) -> str:
    """Where to go once the card is set (the invoice it was set to pay): this site only."""
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(wanted, allowed_hosts={request.get_host()}):
        return wanted
    return ""


@require_http_methods(["GET", "POST"])
@signed_in
def card(request: ConsoleRequest) -> HttpResponse:
    """Set the card invoices are charged to (owners, billing)."""
    console = _opened(request.console, Action.INVOICE_PAY)
    assert console.organization is not None  # noqa: S101 - can() needs one
    if request.method == "GET":
        return _card_page(request, console, form=CardForm())
    form = CardForm(request.POST)
    if not form.is_valid():
        return _card_page(request, console, form=form, status=400)
    try:
        account = billing.payment_method_set(
            actor=console.actor,
            organization=console.organization,
            payment_method_id=form.cleaned_data["payment_method"],
        )
    except ApplicationError as error:
        return _card_page(
            request, console, form=form, error=error.message, status=error.http_status
        )
    messages.success(
        request,
        f"Invoices are charged to {account.payment_method_brand}"
        f" ending {account.payment_method_last4}.",
    )
    return redirect(_next(request) or "console:billing")


def _budgets_page(
    request: ConsoleRequest,
    console: Console,
    *,
    form: BudgetForm,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    return render(
        request,
        "console/billing/budgets.html",
        {
            "budgets": selectors.budgets(console, timezone.now()),
            "form": form,
            "error": error,
            "can_set": console.can(Action.ORGANIZATION_UPDATE),
        },
        status=status,
    )


@require_http_methods(["GET", "POST"])
@signed_in
def budgets(request: ConsoleRequest) -> HttpResponse:
    """Monthly GPU-hour budgets with this month's usage; owners and admins set them."""
    console = _opened(request.console)
    assert console.organization is not None  # noqa: S101 - can() needs one
    if request.method == "GET":
        return _budgets_page(request, console, form=BudgetForm(organization=console.organization))
    form = BudgetForm(request.POST, organization=console.organization)
    if not form.is_valid():
        return _budgets_page(request, console, form=form, status=400)
    try:
        atomic_with_retry(
            metering.budget_set,
            actor=console.actor,
            organization=console.organization,
            gpu_hours=form.cleaned_data["gpu_hours"],
            hard_stop=form.cleaned_data["hard_stop"],
            project=form.cleaned_data["project"],
        )
    except ApplicationError as error:
        return _budgets_page(
            request, console, form=form, error=error.message, status=error.http_status
        )
    messages.success(request, "The budget is set.")
    return redirect("console:budgets")


@require_POST
@signed_in
def budget_clear(request: ConsoleRequest, pk: str) -> HttpResponse:
    console = _opened(request.console)
    budget = console.one(Budget.objects.all(), Action.ORDER_READ, pk)
    try:
        atomic_with_retry(metering.budget_clear, actor=console.actor, budget=budget)
    except ApplicationError as error:
        assert console.organization is not None  # noqa: S101 - _opened made sure
        return _budgets_page(
            request,
            console,
            form=BudgetForm(organization=console.organization),
            error=error.message,
            status=error.http_status,
        )
    messages.success(request, "The budget is removed.")
    return redirect("console:budgets")


urlpatterns: list[URLPattern] = [
    path("billing", index, name="billing"),
    path("billing/invoices/<str:pk>", invoice, name="invoice"),
    path("billing/invoices/<str:pk>/document", invoice_document, name="invoice-document"),
    path("billing/invoices/<str:pk>/pay", invoice_pay, name="invoice-pay"),
    path("billing/card", card, name="card"),
    path("billing/budgets", budgets, name="budgets"),
    path("billing/budgets/<str:pk>/clear", budget_clear, name="budget-clear"),
]
