"""Guarantees 6 and 7: replay equals live state; old schema versions still load."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import store
from events.consumers import ProjectionConsumer, consumer_catch_up
from events.errors import MissingUpcaster
from events.models import Stream
from events.projections import asynchronous
from events.replay import projections_replay
from events.types import DomainEvent, event_type
from tests.ledger.events import AccountClosed, AccountOpened, Deposited, Withdrawn
from tests.ledger.models import Account, Movement, OwnerTotal

pytestmark = pytest.mark.django_db

ACCOUNTS = 3
operation = st.tuples(
    st.integers(0, ACCOUNTS - 1),
    st.sampled_from(["deposit", "withdraw", "close"]),
    st.integers(1, 10_000),
)


def _state() -> dict[str, Any]:
    """Everything the ledger's projections and the store's own projection hold."""
    return {
        "accounts": sorted(
            Account.objects.values_list(
                "stream_id", "owner", "balance_cents", "movements", "closed"
            )
        ),
        "movements": sorted(
            Movement.objects.values_list("position", "account__stream_id", "amount_cents")
        ),
        "owner_totals": sorted(OwnerTotal.objects.values_list("owner", "deposited_cents")),
        "streams": sorted(
            Stream.objects.values_list("stream_type", "stream_id", "version", "last_position")
        ),
    }


def _catch_up_async_projections() -> None:
    for projection in asynchronous():
        consumer_catch_up(ProjectionConsumer(projection))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=st.lists(operation, max_size=30), batch=st.integers(1, 4))
def test_replay_rebuilds_exactly_the_live_state(
    operations: list[tuple[int, str, int]], batch: int
) -> None:
    run = uuid.uuid4().hex[:8]
    versions = [0] * ACCOUNTS
    expected_balance = [0] * ACCOUNTS
    pending: list[list[DomainEvent]] = [[] for _ in range(ACCOUNTS)]
    for account, kind, amount in operations:
        if versions[account] == 0 and not pending[account]:
            pending[account].append(AccountOpened(owner=f"owner-{account % 2}-{run}"))
        if kind == "deposit":
            pending[account].append(Deposited(amount_cents=amount, memo=kind))
            expected_balance[account] += amount
        elif kind == "withdraw":
            pending[account].append(Withdrawn(amount_cents=amount))
            expected_balance[account] -= amount
        else:
            pending[account].append(AccountClosed(reason="test"))
        if len(pending[account]) >= batch:
            store.append(
                "account", f"{run}-{account}", pending[account], expected_version=versions[account]
            )
            versions[account] += len(pending[account])
            pending[account] = []
    for account in range(ACCOUNTS):
        if pending[account]:
            store.append(
                "account", f"{run}-{account}", pending[account], expected_version=versions[account]
            )
    _catch_up_async_projections()
    live = _state()

    projections_replay()
    replayed = _state()

    assert replayed == live
    balances = dict(
        Account.objects.filter(stream_id__startswith=run).values_list("stream_id", "balance_cents")
    )
    assert balances == {
        f"{run}-{a}": expected_balance[a] for a in range(ACCOUNTS) if versions[a] or pending[a]
    }


@pytest.mark.smoke
def test_replay_command_rebuilds_a_damaged_projection() -> None:
    store.append(
        "account",
        "a1",
        [AccountOpened(owner="ada"), Deposited(amount_cents=5, memo="")],
        expected_version=0,
    )
    Account.objects.update(balance_cents=999)
    Stream.objects.all().delete()

    call_command("replay", stdout=None)

    assert Account.objects.get().balance_cents == 5
    assert Stream.objects.get(stream_id="a1").version == 2


def _insert_raw(type_name: str, schema_version: int, data: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO events_event (stream_type, stream_id, version, type, schema_version,"
            " data, metadata, recorded_at) VALUES ('account', 'old', %s, %s, %s, %s, '{}', %s)",
            [
                store.stream_version("account", "old") + 1,
                type_name,
                schema_version,
                data,
                connection.ops.adapt_datetimefield_value(timezone.now()),
            ],
        )


@pytest.mark.smoke
def test_an_old_schema_version_is_upcast_when_read() -> None:
    _insert_raw("ledger.Deposited", 1, '{"amount": 3}')

    (event,) = store.read_stream("account", "old")

    assert event.schema_version == 2
    assert event.data == {"amount_cents": 300, "memo": ""}
    assert event.payload() == Deposited(amount_cents=300, memo="")


def test_replay_applies_upcast_payloads() -> None:
    _insert_raw("ledger.AccountOpened", 1, '{"owner": "old-timer"}')
    _insert_raw("ledger.Deposited", 1, '{"amount": 2}')

    projections_replay()

    assert Account.objects.get(stream_id="old").balance_cents == 200


@event_type("ledger.Renamed", schema_version=3)
class Renamed(DomainEvent):
    name: str


def test_a_missing_upcaster_is_a_clear_error() -> None:
    _insert_raw("ledger.Renamed", 1, '{"old_name": "x"}')

    with pytest.raises(MissingUpcaster, match=r"ledger.Renamed from schema version 1"):
        store.read_stream("account", "old")
