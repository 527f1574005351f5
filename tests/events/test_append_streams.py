"""``append_streams``: several streams in one append, each checked as ``append`` checks it,
all or nothing, with the synchronous projections; ``append_new_streams`` on top of it."""

from __future__ import annotations

import uuid

import pytest

from events import store
from events.errors import StreamConflict
from events.models import Event
from events.store import ANY, NO_STREAM, Metadata, StreamAppend
from tests.ledger.events import AccountOpened, Deposited
from tests.ledger.models import Account, Movement

pytestmark = pytest.mark.django_db


def deposit(cents: int) -> Deposited:
    return Deposited(amount_cents=cents, memo="")


def test_appends_to_several_streams_in_order_with_their_versions_and_metadata() -> None:
    store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
    org = uuid.uuid4()

    recorded = store.append_streams(
        [
            StreamAppend("account", "a1", [deposit(5), deposit(7)], 1),
            StreamAppend(
                "account",
                "a2",
                [AccountOpened(owner="bob")],
                NO_STREAM,
                Metadata(organization_id=org),
            ),
        ]
    )

    assert [(e.stream_id, e.version) for e in recorded] == [("a1", 2), ("a1", 3), ("a2", 1)]
    positions = [e.position for e in recorded]
    assert positions == sorted(positions)
    assert [e.version for e in store.read_stream("account", "a1")] == [1, 2, 3]
    assert Account.objects.get(stream_id="a1").balance_cents == 12
    assert Account.objects.get(stream_id="a2").owner == "bob"
    assert Event.objects.get(stream_id="a2").organization_id == org
    assert Event.objects.filter(stream_id="a1", version=2).get().organization_id is None


@pytest.mark.parametrize(
    ("expected", "actual"),
    [pytest.param(0, 1, id="stale"), pytest.param(NO_STREAM, 1, id="exists")],
)
def test_one_stream_at_another_version_refuses_all(expected: object, actual: int) -> None:
    store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
    head = store.head_position()

    with pytest.raises(StreamConflict) as raised:
        store.append_streams(
            [
                StreamAppend("account", "a2", [AccountOpened(owner="bob")], NO_STREAM),
                StreamAppend("account", "a1", [deposit(5)], expected),  # type: ignore[arg-type]
            ]
        )

    assert raised.value.details["actual_version"] == actual
    assert store.head_position() == head
    assert not Account.objects.filter(stream_id="a2").exists()
    assert Movement.objects.count() == 0


def test_new_streams_start_together_and_refuse_one_that_exists() -> None:
    store.append("account", "a2", [AccountOpened(owner="bob")], expected_version=0)

    started = store.append_new_streams("account", [("a1", [AccountOpened(owner="ada")])])
    with pytest.raises(StreamConflict):
        store.append_new_streams(
            "account", [("a3", [AccountOpened(owner="cy")]), ("a2", [AccountOpened(owner="x")])]
        )

    assert [(e.stream_id, e.version) for e in started] == [("a1", 1)]
    assert sorted(Account.objects.values_list("stream_id", flat=True)) == ["a1", "a2"]


@pytest.mark.parametrize(
    "appends",
    [
        pytest.param([], id="nothing"),
        pytest.param([StreamAppend("account", "a1", [], NO_STREAM)], id="no-events"),
        pytest.param(
            [StreamAppend("account", "a1", [AccountOpened(owner="ada")], ANY)], id="any-version"
        ),
        pytest.param(
            [
                StreamAppend("account", "a1", [AccountOpened(owner="ada")], NO_STREAM),
                StreamAppend("account", "a1", [deposit(1)], 1),
            ],
            id="a-stream-twice",
        ),
    ],
)
def test_what_append_streams_refuses_before_writing(appends: list[StreamAppend]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (each case its own message)
        store.append_streams(appends)

    assert Event.objects.count() == 0
