"""The billing area and the overview's money: invoices as the API shows them, scoped to the
member's organizations, paid through Stripe.js and the local Stripe in Chromium; budgets and
their alerts; who may see and do what (a forged request is refused and writes nothing)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing import services as billing
from billing.models import Invoice, InvoicePayment, InvoiceStatus
from events.models import Event
from metering import services as metering
from metering.intervals import month_of
from metering.models import Budget
from tests.billing.conftest import History
from tests.billing.test_invoices import FEB, JAN, at, close
from tests.builders import Builder, client_with_key, run
from tests.builders import commerce as commerce_builders
from tests.builders.history import catch_up
from tests.console.conftest import Member, Role, member_of, serious_violations, sign_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@dataclass
class Billed:
    """The member's organization with a closed January: one finalized invoice of USD 10.00
    (four GPU-hours of 1xh100 at 250 a GPU-hour)."""

    member: Member
    history: History
    invoice: Invoice


@pytest.fixture
def shop() -> commerce_builders.Shop:
    return commerce_builders.shop()


@pytest.fixture
def billed(member: Member, shop: commerce_builders.Shop) -> Billed:
    history = History(project=member.project, cluster_id=shop.cluster.pk)
    history.run(at(3), at(3, 4))
    close(JAN)
    return Billed(member, history, Invoice.objects.get(organization=member.organization))


def signed_in_as(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def written() -> tuple[int, int]:
    """What a refused request must leave as it was: the log and the payment attempts."""
    return Event.objects.count(), InvoicePayment.objects.count()


def test_invoices_show_what_the_api_shows(build: Builder, billed: Billed) -> None:
    _, secret = build.key(billed.member.organization, billed.member.user)
    (api,) = client_with_key(secret).get("/api/v1/invoices").json()["results"]
    client = signed_in_as(billed.member.user)

    listed = client.get("/billing").content.decode()
    detail = client.get(f"/billing/invoices/{billed.invoice.pk}")
    document = client.get(f"/billing/invoices/{billed.invoice.pk}/document")

    assert (api["number"], api["period"], api["status"], api["total_minor"]) == (
        "INV-2025-01-acme",
        "2025-01",
        "finalized",
        1000,
    )
    row = re.search(r"<tbody>(.*?)</tbody>", listed, re.S)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row[1], re.S)
    assert [re.sub(r"<[^>]+>", "", c).strip() for c in cells] == [
        api["number"],
        api["period"],
        "USD 10.00",
        "USD 10.00",
        api["status"],
    ]
    page = detail.content.decode()
    assert '<strong id="nc-invoice-status">finalized</strong>' in page
    assert '<strong id="nc-invoice-due">USD 10.00</strong>' in page
    assert f'src="/billing/invoices/{billed.invoice.pk}/document"' in page
    assert "Set a card to pay" in page  # an owner, no card yet
    assert document["X-Frame-Options"] == "SAMEORIGIN"
    assert (
        document.content.decode()
        == client_with_key(secret)
        .get(f"/api/v1/invoices/{billed.invoice.pk}/html")
        .content.decode()
    )


def test_another_organizations_invoice_is_not_found(
    build: Builder, billed: Billed, shop: commerce_builders.Shop
) -> None:
    globex = build.organization("Globex")
    History(project=build.project(globex), cluster_id=shop.cluster.pk).run(at(5), at(5, 2))
    close(JAN)
    theirs = Invoice.objects.get(organization=globex)
    client = signed_in_as(billed.member.user)
    before = written()

    assert "INV-2025-01-globex" not in client.get("/billing").content.decode()
    assert client.get(f"/billing/invoices/{theirs.pk}").status_code == 404
    assert client.get(f"/billing/invoices/{theirs.pk}/document").status_code == 404
    assert client.post(f"/billing/invoices/{theirs.pk}/pay").status_code == 404
    assert client.get("/billing/invoices/not-a-uuid").status_code == 404
    assert written() == before


@pytest.mark.parametrize(
    ("role", "opens"),
    [(Role.MEMBER, False), (Role.VIEWER, False), (Role.ADMIN, True), (Role.BILLING, True)],
    ids=["member", "viewer", "admin", "billing"],
)
def test_billing_opens_for_who_may_read_invoices(
    build: Builder, billed: Billed, role: str, opens: bool
) -> None:
    user = member_of(build, billed.member.organization, role, f"{role}@acme.test")
    client = signed_in_as(user)
    overview = client.get("/overview").content.decode()

    assert client.get("/billing").status_code == (200 if opens else 403)
    assert client.get("/billing/budgets").status_code == (200 if opens else 403)
    assert client.get(f"/billing/invoices/{billed.invoice.pk}").status_code == (
        200 if opens else 404
    )
    assert ('href="/billing"' in overview) is opens
    assert ('id="nc-open-invoices"' in overview) is opens
    if role == Role.BILLING:  # billing only: no workloads, no organization pages
        nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', overview, re.S)
        assert nav is not None
        assert re.findall(r"<li><a [^>]*>([^<]+)</a></li>", nav[1]) == ["Overview", "Billing"]


def test_who_may_not_pay_sees_no_button_and_a_forged_payment_writes_nothing(
    build: Builder, billed: Billed
) -> None:
    admin = signed_in_as(member_of(build, billed.member.organization, Role.ADMIN, "a@acme.test"))
    viewer = signed_in_as(member_of(build, billed.member.organization, Role.VIEWER, "v@acme.test"))
    page = admin.get(f"/billing/invoices/{billed.invoice.pk}").content.decode()
    before = written()

    paid_by_admin = admin.post(f"/billing/invoices/{billed.invoice.pk}/pay")
    paid_by_viewer = viewer.post(f"/billing/invoices/{billed.invoice.pk}/pay")
    card_by_admin = admin.post("/billing/card", {"payment_method": "pm_card_visa"})
    card_by_viewer = viewer.post("/billing/card", {"payment_method": "pm_card_visa"})

    assert "Pay USD" not in page
    assert "Set a card" not in page
    assert 'href="/billing/card"' not in admin.get("/billing").content.decode()
    assert paid_by_admin.status_code == 403  # reads invoices, may not pay them
    assert "not allowed to invoice.pay" in paid_by_admin.content.decode()
    assert paid_by_viewer.status_code == 404  # may not even read them
    assert (card_by_admin.status_code, card_by_viewer.status_code) == (403, 403)
    assert written() == before
    billed.invoice.refresh_from_db()
    assert (billed.invoice.status, billed.invoice.payment_attempts) == ("finalized", 0)


def test_budgets_are_set_by_owners_and_refused_to_billing_members(
    build: Builder, member: Member
) -> None:
    owner = signed_in_as(member.user)
    biller = signed_in_as(member_of(build, member.organization, Role.BILLING, "b@acme.test"))

    forged = biller.post("/billing/budgets", {"gpu_hours": "10"})
    assert forged.status_code == 403
    assert not Budget.objects.exists()
    assert "Set the budget" not in biller.get("/billing/budgets").content.decode()

    bad = owner.post("/billing/budgets", {"gpu_hours": "0"})
    assert bad.status_code == 400
    assert not Budget.objects.exists()
    done = owner.post(
        "/billing/budgets", {"gpu_hours": "12.5", "project": str(member.project.pk)}, follow=True
    )
    budget = Budget.objects.get()
    assert (budget.project_id, budget.limit_milli_gpu_seconds) == (member.project.pk, 45_000_000)
    assert "The budget is set." in done.content.decode()
    assert "<td>Training</td>" in done.content.decode()
    assert "12.500 GPU-hours" in done.content.decode()

    refused = biller.post(f"/billing/budgets/{budget.pk}/clear")
    assert refused.status_code == 403
    assert Budget.objects.filter(pk=budget.pk).exists()
    owner.post(f"/billing/budgets/{budget.pk}/clear")
    assert not Budget.objects.exists()


@pytest.fixture
def this_month() -> None:
    """Usage of this UTC month needs an hour of it behind us."""
    if timezone.now() - month_of(timezone.now())[0] < timedelta(hours=2):
        pytest.skip("the first two hours of a UTC month: no full hour of usage behind us yet")


def test_the_overview_shows_spend_open_invoices_budget_alerts_and_payment_problems(
    billed: Billed, this_month: None
) -> None:
    # given an hour of usage this month (USD 2.50), a one-GPU-hour budget the checker saw spent,
    # and January's invoice written off
    now = timezone.now()
    billed.history.run(now - timedelta(minutes=70), now - timedelta(minutes=10))
    catch_up()
    run(metering.budget_set, organization=billed.member.organization, gpu_hours=Decimal(1))
    metering.budgets_check()
    client = signed_in_as(billed.member.user)
    before = client.get("/overview").content.decode()
    run(billing.invoice_mark_uncollectible, invoice=billed.invoice, reason="tests")

    page = client.get("/overview").content.decode()

    assert '<strong id="nc-spend">USD 2.50</strong>' in page
    assert '<strong id="nc-open-invoices">1</strong>' in page
    assert '<span id="nc-open-due">USD 10.00</span>' in page
    assert "The budget of Organization reached 100 % this month: 1.000 of 1.000 GPU-hours." in page
    assert "New work is refused" not in before
    assert "New work is refused: invoice INV-2025-01-acme is unpaid" in page


@pytest.mark.parametrize(
    ("path", "bound"), [("/billing", 10), ("/billing/budgets", 14), ("/overview", 26)]
)
def test_billing_pages_cost_the_same_queries_however_many_rows(
    build: Builder, billed: Billed, path: str, bound: int
) -> None:
    client = signed_in_as(billed.member.user)
    organization = billed.member.organization
    run(metering.budget_set, organization=organization, gpu_hours=Decimal(5))
    run(metering.budget_set, organization=organization, project=billed.member.project, gpu_hours=1)

    def queries() -> int:
        with CaptureQueriesContext(connection) as done:
            assert client.get(path).status_code == 200
        return len(done)

    few = queries()
    billed.history.run(at(2, month=2), at(2, 1, month=2))
    close(FEB)
    for name in ("A", "B", "C"):
        project = build.project(organization, name)
        run(metering.budget_set, organization=organization, project=project, gpu_hours=2)
    assert (Invoice.objects.count(), Budget.objects.count()) == (2, 5)
    assert queries() == few <= bound


# --- in Chromium, against the local Stripe ----------------------------------------------------


@pytest.fixture
def stripe_js() -> Iterator[str]:
    """The local Stripe the test command started, and the Stripe.js it serves for the card
    form (as tests/billing's ``localstripe``, plus the publishable key)."""
    url = os.environ.get("LOCALSTRIPE_URL")
    if not url:
        pytest.skip("needs localstripe: LOCALSTRIPE_URL is unset (make test starts one)")
    with override_settings(
        STRIPE_API_BASE=url,
        STRIPE_API_KEY="sk_test_neocloud",
        STRIPE_PUBLISHABLE_KEY="pk_test_neocloud",
        STRIPE_JS_URL=f"{url}/js.stripe.com/v3/",
    ):
        yield url


def test_an_owner_sets_a_card_with_stripe_js_and_pays_an_invoice(
    page: Page, live_server: object, billed: Billed, stripe_js: str
) -> None:
    base = str(live_server)
    sign_in(page, base, billed.member.user.email)
    page.get_by_role("link", name="Billing").click()
    expect(page.get_by_role("heading", name="Billing")).to_be_visible()
    assert serious_violations(page) == []
    page.get_by_role("link", name="INV-2025-01-acme").click()
    expect(page.locator("#nc-invoice-status")).to_have_text("finalized")
    assert serious_violations(page) == []

    # the card, in Stripe's own form (localstripe's Stripe.js), confirmed as a SetupIntent
    page.get_by_role("link", name="Set a card to pay").click()
    for field, value in [
        ("number", "4242424242424242"),
        ("exp_month", "12"),
        ("exp_year", "34"),
        ("cvc", "123"),
        ("postal_code", "10115"),
    ]:
        page.get_by_placeholder(field, exact=True).fill(value)
    assert serious_violations(page) == []
    page.get_by_role("button", name="Save the card").click()
    expect(page.get_by_role("status")).to_have_text("Invoices are charged to visa ending 4242.")
    expect(page).to_have_url(f"{base}/billing/invoices/{billed.invoice.pk}")

    page.get_by_role("button", name="Pay USD 10.00 with visa ending 4242").click()

    expect(page.get_by_role("status")).to_have_text("Invoice INV-2025-01-acme is paid.")
    expect(page.locator("#nc-invoice-status")).to_have_text("paid")
    expect(page.locator("#nc-invoice-due")).to_have_text("USD 0.00")
    expect(page.locator("#nc-payments")).to_contain_text("succeeded")
    assert serious_violations(page) == []
    billed.invoice.refresh_from_db()
    assert (billed.invoice.status, billed.invoice.paid_minor) == (InvoiceStatus.PAID, 1000)
    payment = billed.invoice.payments.get()
    assert payment.status == "succeeded"
    assert payment.payment_intent_id.startswith("pi_")
    assert payment.payment_method_id.startswith("pm_")
    assert payment.payment_method_id != "pm_card_visa"  # made by Stripe.js, not a test alias

    page.goto(f"{base}/billing/budgets")
    expect(page.get_by_role("heading", name="Budgets")).to_be_visible()
    assert serious_violations(page) == []


def test_a_card_stripe_declines_is_shown_and_nothing_is_set(
    page: Page, live_server: object, billed: Billed, stripe_js: str
) -> None:
    base = str(live_server)
    sign_in(page, base, billed.member.user.email)
    page.goto(f"{base}/billing/card")
    page.get_by_placeholder("number", exact=True).fill("4000000000000002")  # declined
    page.get_by_placeholder("exp_month", exact=True).fill("12")
    page.get_by_placeholder("exp_year", exact=True).fill("34")
    page.get_by_placeholder("cvc", exact=True).fill("123")
    page.get_by_placeholder("postal_code", exact=True).fill("10115")
    page.get_by_role("button", name="Save the card").click()

    expect(page.locator("#nc-card-error")).to_have_text("Your card was declined.")
    assert not Event.objects.filter(type="billing.PaymentMethodSet").exists()
