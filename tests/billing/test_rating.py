"""Money and rating as values: rounding once per line, fractional GPUs, the order of
commitment, credits and tax, and the totals identity for any usage and prices."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.money import Money, round_half_up
from billing.rating import (
    Credit,
    Price,
    PriceBook,
    ReservationWindow,
    SlaCredit,
    Unpriced,
    compose,
    rate_reservations,
    rate_usage,
    usage_key,
)

PROJECT = uuid.UUID(int=1)


@dataclass(frozen=True)
class Usage:
    project_id: uuid.UUID
    offering: str | None
    gpu_model: str
    price_plan: str
    region: str | None
    milli_gpu_seconds: int
    allocation_ids: tuple[uuid.UUID, ...] = ()


def book(minor: int = 250) -> PriceBook:
    return PriceBook(
        catalog={
            ("1xh100", "eu", "on_demand"): Price(minor, "USD"),
            ("1xh100", "eu", "reserved"): Price(180, "USD"),
        },
        defaults={("a100", "on_demand"): Price(199, "USD")},
    )


@pytest.mark.parametrize(
    ("exact", "rounded"),
    [
        pytest.param(Fraction(1, 2), 1, id="half-up"),
        pytest.param(Fraction(3, 2), 2, id="one-and-a-half"),
        pytest.param(Fraction(49999, 100000), 0, id="just-below-half"),
        pytest.param(Fraction(-1, 2), -1, id="negative-half-away-from-zero"),
        pytest.param(Fraction(7), 7, id="whole"),
    ],
)
def test_round_half_up(exact: Fraction, rounded: int) -> None:
    assert round_half_up(exact) == rounded


def test_money_refuses_floats_and_mixed_currencies() -> None:
    with pytest.raises(TypeError):
        Money("USD", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot mix"):
        Money("USD", 1) + Money("EUR", 1)
    assert Money("USD", -123456).format() == "-USD 1,234.56"


@pytest.mark.parametrize(
    ("milli_gpu_seconds", "amount"),
    [
        pytest.param(1000 * 3600, 250, id="one-gpu-hour"),
        pytest.param(500 * 3600, 125, id="half-a-gpu-for-an-hour"),
        pytest.param(250 * 60, 1, id="quarter-gpu-one-minute-1.04-cents"),
        pytest.param(1000 * 7, 0, id="seven-gpu-seconds-0.49-cents"),
        pytest.param(1000 * 36 // 5 * 1, 1, id="7.2-gpu-seconds-0.5-cents-rounds-up"),
        pytest.param(1, 0, id="one-milli-gpu-second"),
    ],
)
def test_usage_is_rated_exactly_and_rounded_once(milli_gpu_seconds: int, amount: int) -> None:
    (line,) = rate_usage(
        [Usage(PROJECT, "1xh100", "h100", "on_demand", "eu", milli_gpu_seconds)], book()
    )
    assert line.amount_minor == amount
    assert line.unit_price_minor == 250


def test_usage_without_offering_takes_the_default_price_of_its_gpu_model() -> None:
    (line,) = rate_usage([Usage(PROJECT, None, "a100", "preemptible", None, 3_600_000)], book())
    assert (line.amount_minor, line.unit_price_minor) == (199, 199)


def test_unpriced_usage_is_refused_not_free() -> None:
    with pytest.raises(Unpriced, match="no default on_demand price for GPU model l4"):
        rate_usage([Usage(PROJECT, None, "l4", "on_demand", None, 1000)], book())
    with pytest.raises(Unpriced, match="no preemptible price in eu"):
        rate_usage([Usage(PROJECT, "1xh100", "h100", "preemptible", "eu", 1000)], book())


def test_usage_under_the_reserved_plan_is_covered_by_the_reservation() -> None:
    usage = Usage(PROJECT, "1xh100", "h100", "reserved", "eu", 3_600_000)

    (line,) = rate_usage([usage], book(), {usage_key(usage): 3_600_000})

    assert line.amount_minor == 0
    assert "covered by the reservation" in line.description


@pytest.mark.parametrize(
    ("covered", "expected"),
    [
        pytest.param(
            3 * 3_600_000,
            [("", 3 * 3_600_000, 0)],
            id="all-inside-the-window",
        ),
        pytest.param(
            3_600_000,
            [("", 3_600_000, 0), ("/beyond", 2 * 3_600_000, 2 * 250)],
            id="two-hours-past-the-window-at-the-on-demand-price",
        ),
        pytest.param(0, [("/beyond", 3 * 3_600_000, 3 * 250)], id="no-reservation-paid-for-it"),
    ],
)
def test_reserved_usage_outside_a_reservation_s_window_is_rated_on_demand(
    covered: int, expected: list[tuple[str, int, int]]
) -> None:
    usage = Usage(PROJECT, "1xh100", "h100", "reserved", "eu", 3 * 3_600_000)

    lines = rate_usage([usage], book(), {usage_key(usage): covered})

    key = usage_key(usage)
    assert [
        (line.source.removeprefix(key), line.milli_gpu_seconds, line.amount_minor) for line in lines
    ] == expected


def test_reserved_usage_beyond_its_window_without_an_on_demand_price_is_refused() -> None:
    usage = Usage(PROJECT, None, "l4", "reserved", None, 1000)
    prices = PriceBook(defaults={("l4", "reserved"): Price(100, "USD")})

    with pytest.raises(Unpriced, match="no on_demand price for GPU model l4 beyond a reservation"):
        rate_usage([usage], prices)


def test_a_reservation_is_billed_for_the_part_of_its_window_in_the_period() -> None:
    window = ReservationWindow(
        reservation_id=uuid.UUID(int=9),
        project_id=PROJECT,
        offering="1xh100",
        region="eu",
        gpu_model="h100",
        gpus=2,
        starts_at=datetime(2025, 1, 31, 22, tzinfo=UTC),
        ends_at=datetime(2025, 2, 1, 3, tzinfo=UTC),
    )
    january = rate_reservations(
        [window], book(), datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC)
    )
    february = rate_reservations(
        [window], book(), datetime(2025, 2, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC)
    )
    assert [line.amount_minor for line in january] == [2 * 2 * 180]
    assert [line.amount_minor for line in february] == [2 * 3 * 180]


def test_the_order_commitment_sla_promotional_tax_prepaid() -> None:
    charges = rate_usage(
        [Usage(PROJECT, "1xh100", "h100", "on_demand", "eu", 40 * 3_600_000)], book()
    )  # 10,000
    draft = compose(
        currency="USD",
        charges=charges,
        commitment_minor=15_000,
        sla_credits=[SlaCredit("sla/x", "breach", 1_000, "USD")],
        credits=[
            Credit(uuid.UUID(int=2), "prepaid", 3_000, "USD"),
            Credit(uuid.UUID(int=3), "promotional", 4_000, "USD"),
        ],
        tax_rate_percent=Decimal(19),
        billing_country="DE",
    )
    assert [(line.kind, line.amount_minor) for line in draft.lines] == [
        ("usage", 10_000),
        ("commitment", 5_000),
        ("sla_credit", -1_000),
        ("promotional_credit", -4_000),
        ("tax", 1_900),  # 19 % of 15,000 - 1,000 - 4,000
        ("prepaid_credit", -3_000),
    ]
    assert (draft.subtotal_minor, draft.credits_minor, draft.tax_minor, draft.total_minor) == (
        15_000,
        8_000,
        1_900,
        8_900,
    )


def test_credits_never_make_an_invoice_negative() -> None:
    charges = rate_usage([Usage(PROJECT, "1xh100", "h100", "on_demand", "eu", 3_600_000)], book())
    draft = compose(
        currency="USD",
        charges=charges,
        commitment_minor=0,
        sla_credits=[SlaCredit("sla/x", "breach", 10_000, "USD")],
        credits=[Credit(uuid.UUID(int=2), "prepaid", 3_000, "USD")],
        tax_rate_percent=Decimal(20),
        billing_country="FR",
    )
    assert draft.total_minor == 0
    assert [line.amount_minor for line in draft.lines] == [250, -250]


usage_items = st.builds(
    Usage,
    project_id=st.sampled_from([uuid.UUID(int=1), uuid.UUID(int=2)]),
    offering=st.sampled_from(["a", "b", None]),
    gpu_model=st.sampled_from(["h100", "l4"]),
    price_plan=st.sampled_from(["on_demand", "preemptible"]),
    region=st.just("eu"),
    milli_gpu_seconds=st.integers(0, 10**12),
)


@given(
    usage=st.lists(
        usage_items,
        max_size=12,
        unique_by=lambda u: (u.project_id, u.offering, u.gpu_model, u.price_plan),
    ),
    prices=st.lists(st.integers(0, 100_000), min_size=4, max_size=4),
    commitment=st.integers(0, 10**8),
    promotional=st.lists(st.integers(1, 10**7), max_size=3),
    prepaid=st.lists(st.integers(1, 10**7), max_size=3),
    sla=st.lists(st.integers(1, 10**6), max_size=3),
    rate=st.decimals(min_value=0, max_value=30, places=3),
)
def test_total_is_rated_usage_minus_credits_plus_tax(
    usage: list[Usage],
    prices: list[int],
    commitment: int,
    promotional: list[int],
    prepaid: list[int],
    sla: list[int],
    rate: Decimal,
) -> None:
    prices_book = PriceBook(
        catalog={
            (o, "eu", p): Price(prices[i * 2 + j], "USD")
            for i, o in enumerate(["a", "b"])
            for j, p in enumerate(["on_demand", "preemptible"])
        },
        defaults={
            ("h100", "on_demand"): Price(prices[0], "USD"),
            ("l4", "on_demand"): Price(prices[3], "USD"),
        },
    )
    charges = rate_usage(usage, prices_book)
    credits = [Credit(uuid.uuid4(), "promotional", a, "USD") for a in promotional] + [
        Credit(uuid.uuid4(), "prepaid", a, "USD") for a in prepaid
    ]
    draft = compose(
        currency="USD",
        charges=charges,
        commitment_minor=commitment,
        sla_credits=[SlaCredit(f"sla/{i}", "b", a, "USD") for i, a in enumerate(sla)],
        credits=credits,
        tax_rate_percent=rate,
        billing_country="DE",
    )

    rated = sum(
        round_half_up(
            Fraction(
                u.milli_gpu_seconds
                * prices_book.price(
                    offering=u.offering, region=u.region, plan=u.price_plan, gpu_model=u.gpu_model
                ).minor_per_gpu_hour,
                3_600_000,
            )
        )
        for u in usage
    )
    assert draft.subtotal_minor == max(rated, commitment)
    assert draft.total_minor == draft.subtotal_minor - draft.credits_minor + draft.tax_minor
    assert draft.total_minor == sum(line.amount_minor for line in draft.lines)
    assert draft.total_minor >= 0
    discounted = sum(
        line.amount_minor for line in draft.lines if line.kind not in {"tax", "prepaid_credit"}
    )
    assert draft.tax_minor == round_half_up(discounted * Fraction(rate) / 100)
    assert all(isinstance(line.amount_minor, int) for line in draft.lines)
