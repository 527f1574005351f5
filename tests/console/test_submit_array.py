"""The new-workload page's copies: a job array submitted through ``workload_submit_array``,
all or none, its task at index 0's page opening; refusals beside their inputs."""

from __future__ import annotations

import re

import pytest

from events import store
from scheduler.models import Workload
from scheduler.services.batch import MAX_BATCH
from tests.console.conftest import Member
from tests.console.test_submit import NEW, _form, _signed_in
from tests.scheduler.conftest import ready_fleet

pytestmark = pytest.mark.django_db


def _error_at(content: bytes, field: str) -> str:
    errors = re.search(
        rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', content.decode(), re.DOTALL
    )
    assert errors is not None, content.decode()[:3000]
    return errors[1]


def test_copies_are_submitted_as_one_array_and_the_first_opens(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)

    response = _signed_in(member).post(NEW, _form(member, name="shard", count="3"))

    tasks = list(Workload.objects.order_by("array_index"))
    assert response.status_code == 302
    assert response["Location"] == f"/workloads/{tasks[0].pk}"
    assert [(w.name, w.array_index, w.array_count) for w in tasks] == [
        ("shard", 0, 3),
        ("shard", 1, 3),
        ("shard", 2, 3),
    ]
    assert len({w.array_id for w in tasks}) == 1


def test_one_copy_is_a_workload_alone(member: Member) -> None:
    ready_fleet(nodes=1, gpus=8)

    _signed_in(member).post(NEW, _form(member, count="1"))

    assert Workload.objects.get().array_id is None


@pytest.mark.parametrize(
    ("fields", "shown_at", "words"),
    [
        pytest.param({"count": str(MAX_BATCH + 1)}, "count", "less than or equal", id="too-many"),
        pytest.param({"count": "0"}, "count", "greater than or equal", id="none"),
        pytest.param(
            {"count": "4", "gpus_per_node": "16"}, "gpus_per_node", "largest node", id="too-large"
        ),
    ],
)
def test_a_refused_array_shows_why_beside_its_field_and_writes_nothing(
    member: Member, fields: dict[str, str], shown_at: str, words: str
) -> None:
    ready_fleet(nodes=1, gpus=8)
    head = store.head_position()

    response = _signed_in(member).post(NEW, _form(member, **fields))

    assert response.status_code == 400
    assert words in _error_at(response.content, shown_at)
    assert store.head_position() == head
    assert not Workload.objects.exists()
