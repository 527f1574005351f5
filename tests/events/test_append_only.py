"""Guarantee 1: the database rejects every change to the log but INSERT."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from events import store
from events.models import Event
from tests.ledger.events import AccountOpened

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_event() -> int:
    (recorded,) = store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
    return recorded.position


@pytest.mark.smoke
@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("UPDATE events_event SET type = 'x' WHERE position = %s", id="update"),
        pytest.param("DELETE FROM events_event WHERE position = %s", id="delete"),
    ],
)
def test_update_and_delete_are_rejected_by_the_database(one_event: int, statement: str) -> None:
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        connection.cursor().execute(statement, [one_event])

    assert Event.objects.get(position=one_event).type == "ledger.AccountOpened"


@pytest.mark.postgres
def test_truncate_is_rejected_by_the_database(one_event: int) -> None:
    with pytest.raises(DatabaseError, match="append-only: TRUNCATE"), transaction.atomic():
        connection.cursor().execute("TRUNCATE events_event CASCADE")

    assert Event.objects.filter(position=one_event).exists()


@pytest.mark.smoke
def test_orm_update_is_rejected_too(one_event: int) -> None:
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Event.objects.filter(position=one_event).update(stream_id="other")

    assert Event.objects.get(position=one_event).stream_id == "a1"
