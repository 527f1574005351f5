"""Guarantees 2 and 4 under real concurrency: separate processes on PostgreSQL."""

from __future__ import annotations

import multiprocessing
import random
import time
from multiprocessing.synchronize import Barrier

import pytest
from django.db import connection, connections, transaction

from events import store
from events.errors import StreamConflict
from events.models import Event
from events.store import ANY
from tests.ledger.events import AccountOpened, Deposited

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WRITERS = 4
APPENDS_PER_WRITER = 60


def _writer(worker: int, barrier: Barrier) -> None:
    rng = random.Random(worker)
    stream = f"writer-{worker}"
    store.append("account", stream, [AccountOpened(owner=stream)], expected_version=0)
    barrier.wait()
    for n in range(APPENDS_PER_WRITER):
        with transaction.atomic():
            batch = [Deposited(amount_cents=n, memo="") for _ in range(rng.randint(1, 3))]
            store.append("account", stream, batch, expected_version=ANY)
            # Hold the transaction open a little after drawing positions: without the append
            # lock, a later position could commit first and a tailing reader would skip ours.
            time.sleep(rng.random() / 500)
    connection.close()


def _fork_context() -> multiprocessing.context.ForkContext:
    connections.close_all()  # children must open their own connections
    return multiprocessing.get_context("fork")


def test_a_tailing_reader_sees_every_event_once_and_in_position_order() -> None:
    context = _fork_context()
    barrier = context.Barrier(WRITERS + 1)
    writers = [context.Process(target=_writer, args=(w, barrier)) for w in range(WRITERS)]
    for process in writers:
        process.start()
    barrier.wait()

    seen: list[int] = []
    after = 0
    while True:
        running = any(p.is_alive() for p in writers)
        batch = store.read_all(after=after, limit=50)
        seen += [e.position for e in batch]
        after = batch[-1].position if batch else after
        if not batch and not running:
            break

    assert all(p.exitcode == 0 for p in writers)
    committed = list(Event.objects.order_by("position").values_list("position", flat=True))
    assert seen == committed  # every event, once, in position order
    assert len(committed) >= WRITERS * (APPENDS_PER_WRITER + 1)


def _racer(stream: str, barrier: Barrier, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    barrier.wait()
    try:
        store.append("account", stream, [Deposited(amount_cents=1, memo="")], expected_version=1)
        results.put("won")
    except StreamConflict:
        results.put("conflict")
    connection.close()


@pytest.mark.parametrize("contenders", [2, 4])
def test_concurrent_appends_at_one_expected_version_have_exactly_one_winner(
    contenders: int,
) -> None:
    store.append("account", "contested", [AccountOpened(owner="x")], expected_version=0)
    context = _fork_context()
    barrier = context.Barrier(contenders)
    results = context.Queue()
    racers = [
        context.Process(target=_racer, args=("contested", barrier, results))
        for _ in range(contenders)
    ]
    for process in racers:
        process.start()
    for process in racers:
        process.join(30)

    outcomes = sorted(results.get(timeout=5) for _ in racers)
    assert outcomes == ["conflict"] * (contenders - 1) + ["won"]
    assert store.stream_version("account", "contested") == 2
