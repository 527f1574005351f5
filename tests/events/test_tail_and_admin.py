"""``manage.py events tail`` and the read-only event browser in the admin."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from events import store
from events.models import Event
from tests.ledger.events import AccountOpened, Deposited

pytestmark = pytest.mark.django_db


@pytest.fixture
def history() -> list[int]:
    first = store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
    second = store.append("account", "b2", [AccountOpened(owner="bob")], expected_version=0)
    third = store.append("account", "a1", [Deposited(amount_cents=5, memo="m")], expected_version=1)
    return [e.position for e in first + second + third]


def _tail(*args: str) -> list[dict[str, object]]:
    out = io.StringIO()
    call_command("events", "tail", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.smoke
def test_tail_prints_every_event_as_a_json_line(history: list[int]) -> None:
    lines = _tail()

    assert [line["position"] for line in lines] == history
    assert lines[2]["type"] == "ledger.Deposited"
    assert lines[2]["data"] == {"amount_cents": 5, "memo": "m"}
    assert lines[2]["version"] == 2


@pytest.mark.parametrize(
    ("args", "picked"),
    [
        pytest.param(("--stream", "account:a1"), [0, 2], id="one-stream"),
        pytest.param(("--stream", "nothing"), [], id="other-stream-type"),
        pytest.param(("--type", "ledger.Deposited"), [2], id="by-type"),
        pytest.param(("--limit", "2"), [0, 1], id="limit"),
    ],
)
def test_tail_filters(history: list[int], args: tuple[str, ...], picked: list[int]) -> None:
    assert [line["position"] for line in _tail(*args)] == [history[i] for i in picked]


def test_tail_from_a_position(history: list[int]) -> None:
    assert [line["position"] for line in _tail("--from", str(history[0]))] == history[1:]


@pytest.fixture
def operator_client() -> Client:
    user = get_user_model().objects.create_superuser("op@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.smoke
def test_the_admin_lists_and_shows_events_read_only(
    history: list[int], operator_client: Client
) -> None:
    listing = operator_client.get("/admin/events/event/?type__exact=ledger.Deposited")
    detail = operator_client.get(f"/admin/events/event/{history[0]}/change/")

    assert listing.status_code == 200
    assert "ledger.Deposited" in listing.content.decode()
    assert detail.status_code == 200
    assert "ada" in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("get", "/admin/events/event/add/", id="add"),
        pytest.param("post", "/admin/events/event/{pos}/change/", id="change"),
        pytest.param("post", "/admin/events/event/{pos}/delete/", id="delete"),
    ],
)
def test_the_admin_refuses_to_write_events(
    history: list[int], operator_client: Client, method: str, path: str
) -> None:
    response = getattr(operator_client, method)(path.format(pos=history[0]), {"type": "x"})

    assert response.status_code == 403
    assert Event.objects.get(position=history[0]).type == "ledger.AccountOpened"
