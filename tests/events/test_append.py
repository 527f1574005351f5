"""Guarantees 2 and 3: optimistic concurrency, and appends atomic with their projections."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.db import IntegrityError, connection, transaction

from events import projections, store
from events.errors import MalformedEvent, StreamConflict, UnknownEventType
from events.models import Event
from events.projections import handles
from events.store import ANY, NO_STREAM, Metadata, RecordedEvent
from events.types import DomainEvent
from tests.ledger.events import AccountClosed, AccountOpened, Deposited, Withdrawn
from tests.ledger.models import Account, Movement

pytestmark = pytest.mark.django_db


def opened(owner: str = "ada") -> AccountOpened:
    return AccountOpened(owner=owner)


def deposit(cents: int) -> Deposited:
    return Deposited(amount_cents=cents, memo="")


@pytest.mark.smoke
def test_append_numbers_versions_and_positions_in_order() -> None:
    first = store.append("account", "a1", [opened(), deposit(5)], expected_version=0)
    second = store.append("account", "a1", [deposit(7)], expected_version=2)

    assert [e.version for e in first + second] == [1, 2, 3]
    positions = [e.position for e in first + second]
    assert positions == sorted(positions)
    assert [e.data for e in store.read_stream("account", "a1")] == [
        {"owner": "ada"},
        {"amount_cents": 5, "memo": ""},
        {"amount_cents": 7, "memo": ""},
    ]


@pytest.mark.smoke
@pytest.mark.parametrize("stale", [0, 1, 3], ids=["behind-by-2", "behind-by-1", "ahead"])
def test_stale_expected_version_raises_conflict_and_writes_nothing(stale: int) -> None:
    store.append("account", "a1", [opened(), deposit(5)], expected_version=0)
    head = store.head_position()

    with pytest.raises(StreamConflict) as raised:
        store.append("account", "a1", [deposit(1)], expected_version=stale)

    assert raised.value.code == "stream_conflict"
    assert raised.value.details["actual_version"] == 2
    assert store.head_position() == head
    assert Movement.objects.count() == 1
    assert store.stream_version("account", "a1") == 2


def test_no_stream_mode_accepts_a_new_stream_and_refuses_an_existing_one() -> None:
    store.append("account", "a1", [opened()], expected_version=NO_STREAM)

    with pytest.raises(StreamConflict, match="expected no stream"):
        store.append("account", "a1", [opened()], expected_version=NO_STREAM)

    assert store.stream_version("account", "a1") == 1


def test_any_mode_appends_whatever_the_version() -> None:
    store.append("account", "a1", [opened()], expected_version=ANY)
    store.append("account", "a1", [deposit(1)], expected_version=ANY)

    assert [e.version for e in store.read_stream("account", "a1")] == [1, 2]


def test_stream_and_version_are_unique_in_the_database() -> None:
    store.append("account", "a1", [opened()], expected_version=0)

    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(
            stream_type="account",
            stream_id="a1",
            version=1,
            type="ledger.AccountOpened",
            schema_version=1,
            data={"owner": "eve"},
            metadata={},
            recorded_at="2026-01-01T00:00:00Z",
        )


def test_streams_of_different_types_version_independently() -> None:
    store.append("account", "x", [opened()], expected_version=0)
    store.append("other", "x", [AccountClosed(reason="n/a")], expected_version=0)

    assert store.stream_version("account", "x") == 1
    assert store.stream_version("other", "x") == 1


def test_metadata_is_stored_with_the_organization_indexed() -> None:
    org = uuid.uuid4()
    meta = Metadata(
        actor="user:42",
        organization_id=org,
        correlation_id="c-1",
        causation_id="e-0",
        idempotency_key="k-1",
    )

    (recorded,) = store.append("account", "a1", [opened()], expected_version=0, metadata=meta)

    row = Event.objects.get(position=recorded.position)
    assert row.organization_id == org
    assert row.metadata == {
        "actor": "user:42",
        "organization_id": str(org),
        "correlation_id": "c-1",
        "causation_id": "e-0",
        "idempotency_key": "k-1",
    }


class NotRegistered(DomainEvent):
    owner: str


def test_an_unregistered_event_type_is_rejected_at_append() -> None:
    with pytest.raises(UnknownEventType):
        store.append("account", "a1", [NotRegistered(owner="x")], expected_version=0)

    assert store.head_position() == 0


def test_a_malformed_payload_is_rejected_at_append() -> None:
    bad = Deposited.model_construct(amount_cents="lots", memo=None)

    with pytest.raises(MalformedEvent, match=r"ledger\.Deposited"):
        store.append("account", "a1", [opened(), bad], expected_version=0)

    assert store.head_position() == 0


def test_payload_validation_refuses_wrong_fields() -> None:
    with pytest.raises(ValueError, match="amount_cents"):
        Deposited(amount_cents="lots", memo="")  # type: ignore[arg-type]


class ExplodingProjection(projections.Projection):
    name = "test.exploding"

    @handles(Withdrawn)
    def withdrawn(self, event: RecordedEvent) -> None:
        raise RuntimeError("projection failed")


@pytest.fixture
def exploding_projection() -> Iterator[None]:
    projections.register(ExplodingProjection(), synchronous=True)
    yield
    projections.unregister(ExplodingProjection.name)


@pytest.mark.usefixtures("exploding_projection")
def test_a_failing_projection_rolls_back_the_whole_append() -> None:
    store.append("account", "a1", [opened()], expected_version=0)

    with pytest.raises(RuntimeError, match="projection failed"):
        store.append("account", "a1", [deposit(5), Withdrawn(amount_cents=1)], expected_version=1)

    assert store.stream_version("account", "a1") == 1
    assert Movement.objects.count() == 0
    assert Account.objects.get(stream_id="a1").balance_cents == 0


def test_projections_commit_with_the_append_in_the_callers_transaction() -> None:
    seen_inside: list[int] = []

    def append_then_fail() -> None:
        with transaction.atomic():
            store.append("account", "a1", [opened(), deposit(5)], expected_version=0)
            seen_inside.append(Account.objects.get(stream_id="a1").balance_cents)
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        append_then_fail()

    assert seen_inside == [5]
    assert store.head_position() == 0
    assert not Account.objects.exists()


@pytest.mark.postgres
def test_the_append_lock_is_held_until_the_transaction_ends() -> None:
    with transaction.atomic():
        store.append("account", "a1", [opened()], expected_version=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid() AND granted"
            )
            (held,) = cursor.fetchone()
    assert held == 1
