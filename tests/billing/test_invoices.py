"""Closing a month: usage rated from the log (fractional GPUs, preemption mid-hour, UTC
period boundaries), reservations, commitments, credits, tax, SLA credits on the next
invoice; closing twice; replay; the invoices API and its page."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command

from billing import services
from billing.models import CreditGrant, Invoice, InvoiceStatus, SlaDefinition, TaxRate
from events import store
from events.models import Event
from events.replay import projections_replay
from scheduler import events as sev
from tenants.models import Role
from tests.billing.conftest import History
from tests.builders import SYSTEM, Builder, run
from tests.builders import commerce as commerce_builders
from tests.builders.history import clock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

JAN = services.Period.parse("2025-01")
FEB = services.Period.parse("2025-02")


def at(day: int, hour: int = 0, minute: int = 0, month: int = 1) -> datetime:
    return datetime(2025, month, day, hour, minute, tzinfo=UTC)


def close(period: services.Period = JAN) -> services.CloseReport:
    return services.period_close(actor=SYSTEM, period=period)


def only_invoice(customer: commerce_builders.Customer, period: str = "2025-01") -> Invoice:
    return Invoice.objects.get(organization=customer.organization, period=period)


def lines(invoice: Invoice) -> list[tuple[str, int]]:
    return [(line.kind, line.amount_minor) for line in invoice.lines.all()]


def test_usage_is_rated_per_line_with_fractions_preemption_and_the_utc_boundary(
    customer: commerce_builders.Customer, history: History
) -> None:
    # given two hours on 1xh100 (250/h), half an L4 for an hour (80/h of the share),
    # a preemptible run preempted after 20 minutes (100/h), and an hour across new year's
    two_hours = history.run(at(10, 10), at(10, 12))
    half = history.submit(at(11, 9), offering="l4-half")
    share = history.grant(half, at(11, 9), milli=500)
    history.release(half, share, at(11, 10))
    cheap = history.submit(at(12, 10), plan="preemptible")
    preempted = history.grant(cheap, at(12, 10))
    history.preempt(cheap, preempted, at(12, 10, 20))
    crossing = history.run(at(31, 23, 30), at(1, 0, 30, month=2))

    # when January is closed
    report = close()

    # then one line per usage, each rounded once, naming its allocations
    invoice = only_invoice(customer)
    assert report.refused == {}
    assert invoice.status == InvoiceStatus.FINALIZED
    by_offering = {
        (line.offering, line.price_plan): (
            line.amount_minor,
            line.milli_gpu_seconds,
            set(line.allocation_ids),
        )
        for line in invoice.lines.all()
    }
    assert by_offering == {
        ("1xh100", "on_demand"): (500 + 125, (7200 + 1800) * 1000, {str(two_hours), str(crossing)}),
        ("l4-half", "on_demand"): (40, 3600 * 500, {str(share)}),
        ("1xh100", "preemptible"): (33, 1200 * 1000, {str(preempted)}),  # 33.33 rounds down
    }
    assert (invoice.subtotal_minor, invoice.tax_minor, invoice.total_minor) == (698, 0, 698)
    # and the other half hour is February's
    close(FEB)
    assert lines(only_invoice(customer, "2025-02")) == [("usage", 125)]


def test_closing_twice_changes_nothing(
    customer: commerce_builders.Customer, history: History
) -> None:
    history.run(at(3), at(4))
    call_command("close_period", "2025-01")
    before = Event.objects.count()
    invoice = only_invoice(customer)

    call_command("close_period", "2025-01")

    assert Event.objects.count() == before
    again = only_invoice(customer)
    assert (again.version, again.total_minor, again.status) == (
        invoice.version,
        invoice.total_minor,
        InvoiceStatus.FINALIZED,
    )


def test_a_draft_is_redrafted_until_finalized(
    customer: commerce_builders.Customer, history: History
) -> None:
    history.run(at(3), at(3, 1))
    services.period_close(actor=SYSTEM, period=JAN, finalize=False)
    assert only_invoice(customer).status == InvoiceStatus.DRAFT
    history.run(at(5), at(5, 1))
    services.period_close(actor=SYSTEM, period=JAN, finalize=False)
    assert only_invoice(customer).total_minor == 500
    close()
    assert only_invoice(customer).status == InvoiceStatus.FINALIZED


def snapshot() -> list[tuple[Any, ...]]:
    return [
        (
            i.number,
            i.status,
            i.subtotal_minor,
            i.credits_minor,
            i.tax_minor,
            i.total_minor,
            i.paid_minor,
            i.version,
            tuple((line.kind, line.amount_minor, line.source) for line in i.lines.all()),
        )
        for i in Invoice.objects.order_by("number")
    ] + [(c.id, c.remaining_minor) for c in CreditGrant.objects.order_by("id")]


def test_replaying_the_log_gives_the_same_invoices_to_the_cent(
    customer: commerce_builders.Customer, history: History
) -> None:
    TaxRate.objects.create(country="DE", rate_percent=Decimal("19"))
    run(
        services.account_profile_set,
        organization=customer.organization,
        billing_country="DE",
        currency="USD",
        minimum_commitment_minor=0,
    )
    run(
        services.credit_grant,
        organization=customer.organization,
        kind="promotional",
        amount_minor=77,
        currency="USD",
    )
    history.run(at(3), at(3, 7, 13))
    close()
    history.run(at(3, month=2), at(4, month=2))
    close(FEB)
    live = snapshot()

    projections_replay(names=["billing.billing"])

    assert snapshot() == live
    assert len(live) == 3


def test_commitment_credits_and_tax_in_their_order(
    customer: commerce_builders.Customer, history: History
) -> None:
    TaxRate.objects.create(country="DE", rate_percent=Decimal("19"))
    run(
        services.account_profile_set,
        organization=customer.organization,
        billing_country="DE",
        currency="USD",
        minimum_commitment_minor=1_000,
    )
    prepaid = run(
        services.credit_grant,
        organization=customer.organization,
        kind="prepaid",
        amount_minor=5_000,
        currency="USD",
    )
    promo = run(
        services.credit_grant,
        organization=customer.organization,
        kind="promotional",
        amount_minor=100,
        currency="USD",
    )
    history.run(at(3), at(3, 2))  # 500

    close()

    invoice = only_invoice(customer)
    assert lines(invoice) == [
        ("usage", 500),
        ("commitment", 500),
        ("promotional_credit", -100),
        ("tax", 171),
        ("prepaid_credit", -1071),
    ]
    assert (invoice.total_minor, invoice.status) == (0, InvoiceStatus.PAID)
    assert CreditGrant.objects.get(pk=promo).remaining_minor == 0
    assert CreditGrant.objects.get(pk=prepaid).remaining_minor == 5_000 - 1_071


def test_an_organization_without_usage_gets_no_invoice(
    customer: commerce_builders.Customer,
) -> None:
    assert close().invoices == []


def test_unpriced_usage_is_reported_and_not_invoiced(
    customer: commerce_builders.Customer, history: History
) -> None:
    history.run(at(3), at(4), offering=None)  # no default price for h100
    report = close()
    assert report.refused == {
        customer.organization.slug: "no default on_demand price for GPU model h100"
    }
    assert not Invoice.objects.exists()


def reserve(
    history: History, starts: datetime, ends: datetime, cancelled: datetime | None
) -> uuid.UUID:
    reservation_id = uuid.uuid4()
    with clock(starts - timedelta(days=1)):
        store.append(
            sev.RESERVATION_STREAM,
            str(reservation_id),
            [
                sev.ReservationCreated(
                    reservation_id=reservation_id,
                    organization_id=history.project.organization_id,
                    project_id=history.project.pk,
                    cluster_id=history.cluster_id,
                    gpu_model="h100",
                    gpus=2,
                    starts_at=starts,
                    ends_at=ends,
                    offering="h100-reserved",
                    order_id=None,
                )
            ],
            expected_version=0,
        )
    if cancelled:
        with clock(cancelled):
            store.append(
                sev.RESERVATION_STREAM,
                str(reservation_id),
                [sev.ReservationCancelled(reason="no")],
                expected_version=1,
            )
    return reservation_id


def test_reserved_capacity_is_billed_for_its_window_used_or_not(
    customer: commerce_builders.Customer, history: History
) -> None:
    held = reserve(history, at(5), at(6), cancelled=None)
    reserve(history, at(7), at(8), cancelled=at(6, 12))  # cancelled before it began
    committed = reserve(history, at(9), at(10), cancelled=at(9, 1))  # cancelled during it

    close()

    invoice = only_invoice(customer)
    assert [(line.source, line.amount_minor) for line in invoice.lines.all()] == [
        (f"reservation/{held}", 2 * 24 * 180),
        (f"reservation/{committed}", 2 * 24 * 180),
    ]


def test_work_on_a_reservation_past_its_window_is_billed_on_demand(
    customer: commerce_builders.Customer, history: History
) -> None:
    # given a reservation of 2 H100 for the 5th, a default on-demand price of 300 an hour, and
    # work on the reservation that ran on two hours past its end
    run(
        services.default_price_set,
        gpu_model="h100",
        price_per_gpu_hour_minor=300,
        currency="USD",
    )
    held = reserve(history, at(5), at(6), cancelled=None)
    work = history.submit(at(5), offering="h100-reserved", plan="reserved", reservation_id=held)
    allocation = history.grant(work, at(5))
    history.running(work, allocation, at(5))
    history.release(work, allocation, at(6, 2))

    close()

    # then the window is billed, the usage inside it is at zero, and the two hours after it
    # at the on-demand price
    key = f"usage/{customer.project.pk}/h100-reserved/h100/reserved/{commerce_builders.REGION}"
    assert [
        (line.source, line.milli_gpu_seconds, line.amount_minor)
        for line in only_invoice(customer).lines.all()
    ] == [
        (key, 24 * 3_600_000, 0),
        (f"{key}/beyond", 2 * 3_600_000, 2 * 300),
        (f"reservation/{held}", 2 * 24 * 3_600_000, 2 * 24 * 180),
    ]


def test_sla_breaches_become_credits_on_the_next_invoice(
    customer: commerce_builders.Customer, history: History
) -> None:
    SlaDefinition.objects.create(
        offering="1xh100",
        availability_percent=Decimal("99.9"),
        availability_credit_percent=Decimal("10"),
        max_provisioning_s=300,
    )
    service = history.submit(at(10), name="chat")
    first = history.grant(service, at(10))
    history.running(service, first, at(10, 0, 10))  # 600 s to run: a provisioning breach
    history.release(service, first, at(20), reason="node_failure", status="pending")
    second = history.grant(service, at(20, 1))
    history.running(service, second, at(20, 1))  # down one hour
    history.release(service, second, at(31), reason="cancelled", status="cancelled")
    history.run(at(2, month=2), at(2, 4, month=2))  # February's usage: 1,000

    close()
    january = only_invoice(customer)
    close(FEB)
    february = only_invoice(customer, "2025-02")

    assert not january.lines.filter(kind="sla_credit").exists()
    credits = february.lines.filter(kind="sla_credit").order_by("position")
    assert [(c.source, c.amount_minor) for c in credits] == [
        (f"sla/provisioning/{first}", -42),  # 600 GPU-seconds at 250/h = 41.67
        (f"sla/availability/{service}/2025-01", -958),  # 10 % = 12,575, capped at what is left
    ]
    assert "took 600 s to run (promised 300 s)" in credits[0].description
    assert "available 99.802 % in 2025-01 (promised 99.9 %)" in credits[1].description
    assert february.total_minor == 0


def test_an_sla_downtime_starts_at_the_failed_nodes_last_heartbeat(
    customer: commerce_builders.Customer, history: History
) -> None:
    SlaDefinition.objects.create(
        offering="1xh100",
        availability_percent=Decimal("99.9"),
        availability_credit_percent=Decimal("10"),
    )
    service = history.submit(at(10), name="chat")
    first = history.grant(service, at(10))
    history.running(service, first, at(10))
    # Its node's last heartbeat came 105 s before the failure was detected and released it.
    silent = at(20) - timedelta(seconds=105)
    history.release(
        service, first, at(20), reason="node_failure", status="pending", ended_at=silent
    )
    second = history.grant(service, at(20, 1))
    history.running(service, second, at(20, 1))
    history.release(service, second, at(31), reason="cancelled", status="cancelled")
    history.run(at(2, month=2), at(2, 4, month=2))  # February's usage: its invoice

    close()
    close(FEB)

    (credit,) = only_invoice(customer, "2025-02").lines.filter(kind="sla_credit")
    assert "down 3705 s after node failures" in credit.description


# --- API -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "sees"),
    [
        (Role.OWNER, True),
        (Role.ADMIN, True),
        (Role.BILLING, True),
        (Role.MEMBER, False),
        (Role.VIEWER, False),
    ],
    ids=lambda v: str(v),
)
def test_who_reads_invoices(
    customer: commerce_builders.Customer, history: History, role: Role, sees: bool
) -> None:
    history.run(at(3), at(4))
    close()
    invoice = only_invoice(customer)

    listed = customer.get("/api/v1/invoices", role)
    detail = customer.get(f"/api/v1/invoices/{invoice.pk}", role)

    assert listed.status_code == 200
    assert [row["number"] for row in listed.json()["results"]] == ([invoice.number] if sees else [])
    assert detail.status_code == (200 if sees else 404)


def test_invoice_detail_and_page(
    customer: commerce_builders.Customer, history: History, build: Builder
) -> None:
    allocation = history.run(at(3), at(3, 1))
    close()
    invoice = only_invoice(customer)

    body = customer.get(f"/api/v1/invoices/{invoice.pk}").json()
    page = customer.get(f"/api/v1/invoices/{invoice.pk}/html")
    other = commerce_builders.customer(build, "Globex")

    assert body["total_minor"] == 250
    assert body["lines"][0]["allocation_ids"] == [str(allocation)]
    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    assert invoice.number in page.content.decode()
    assert "USD 2.50" in page.content.decode()
    assert other.get(f"/api/v1/invoices/{invoice.pk}").status_code == 404
    assert other.get(f"/api/v1/invoices/{invoice.pk}/html").status_code == 404
