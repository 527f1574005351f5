"""Guarantees 5 and 8: checkpoints commit with effects; consumers wake on appends."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection, connections

from events import store
from events.consumers import Consumer, checkpoint_position, consumer_catch_up, consumer_run
from events.models import Checkpoint, Event
from events.store import RecordedEvent
from events.wakeup import Listener
from tests.ledger.events import AccountOpened, Deposited
from tests.ledger.models import Effect


class Crash(Exception):
    pass


class RecordingConsumer(Consumer):
    """Writes one Effect row per event; can crash right after the effect of one position."""

    name = "test.recording"
    batch_size = 4

    def __init__(self, *, crash_at: int | None = None, hang_marker: Path | None = None) -> None:
        self.crash_at = crash_at
        self.hang_marker = hang_marker

    def handle(self, event: RecordedEvent) -> None:
        Effect.objects.create(consumer=self.name, position=event.position)
        if event.position == self.crash_at:
            if self.hang_marker is None:
                raise Crash(event.position)
            self.hang_marker.write_text("effect written, checkpoint not yet")
            time.sleep(120)  # killed here, between effect and checkpoint


class DepositsOnly(RecordingConsumer):
    name = "test.deposits_only"

    @property
    def event_types(self) -> frozenset[str] | None:
        return frozenset({Deposited.event_type})


def _history(deposits: int = 9) -> list[int]:
    store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
    recorded = store.append(
        "account",
        "a1",
        [Deposited(amount_cents=n, memo="") for n in range(deposits)],
        expected_version=1,
    )
    return [e.position for e in recorded]


def _all_positions() -> list[int]:
    return list(Event.objects.values_list("position", flat=True))


def _effects(name: str) -> Counter[int]:
    return Counter(Effect.objects.filter(consumer=name).values_list("position", flat=True))


@pytest.mark.smoke
@pytest.mark.django_db
def test_catch_up_applies_every_event_once_and_moves_the_checkpoint() -> None:
    _history()
    consumer = RecordingConsumer()

    handled = consumer_catch_up(consumer)

    assert handled == 10
    assert _effects(consumer.name) == Counter(_all_positions())
    assert checkpoint_position(consumer.name) == store.head_position()
    assert consumer_catch_up(consumer) == 0


@pytest.mark.django_db
def test_a_crash_between_effect_and_checkpoint_neither_loses_nor_repeats() -> None:
    positions = _history()
    crash_at = positions[5]  # in the second batch of four
    with pytest.raises(Crash):
        consumer_catch_up(RecordingConsumer(crash_at=crash_at))
    before_restart = checkpoint_position(RecordingConsumer.name)

    consumer_catch_up(RecordingConsumer())

    assert before_restart < crash_at  # the crashed batch's checkpoint did not commit
    assert _effects(RecordingConsumer.name) == Counter(_all_positions())


@pytest.mark.django_db
def test_a_filtered_consumer_reads_only_its_types_and_still_reaches_the_head() -> None:
    positions = _history(deposits=3)

    consumer_catch_up(DepositsOnly())

    assert _effects(DepositsOnly.name) == Counter(positions)
    assert checkpoint_position(DepositsOnly.name) == store.head_position()


def _run_until_killed(crash_at: int, marker: str) -> None:
    consumer_catch_up(RecordingConsumer(crash_at=crash_at, hang_marker=Path(marker)))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_consumer_killed_by_sigkill_mid_batch_resumes_exactly_once(tmp_path: Path) -> None:
    positions = _history()
    crash_at = positions[6]
    marker = tmp_path / "hung"
    connections.close_all()
    child = multiprocessing.get_context("fork").Process(
        target=_run_until_killed, args=(crash_at, str(marker))
    )
    child.start()
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the consumer never reached the crash point"
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    before_restart = checkpoint_position(RecordingConsumer.name)

    consumer_catch_up(RecordingConsumer())

    assert child.exitcode == -signal.SIGKILL
    assert 0 < before_restart < crash_at
    assert _effects(RecordingConsumer.name) == Counter(_all_positions())


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_listener_is_woken_by_a_commit_on_another_connection() -> None:
    def append_elsewhere() -> None:
        store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
        connection.close()

    with Listener() as listener:
        assert listener.wait(0.05) is False
        writer = threading.Thread(target=append_elsewhere)
        writer.start()
        woken = listener.wait(30)
        writer.join()

    assert woken is True


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_running_consumer_reacts_to_an_append_without_waiting_for_its_poll() -> None:
    stop = threading.Event()
    consumer = RecordingConsumer()

    def run() -> None:
        consumer_run(consumer, stop=stop, poll_interval=3600)
        connection.close()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 30
    while checkpoint_position(consumer.name) == 0 and not _checkpoint_exists(consumer.name):
        assert time.monotonic() < deadline
        time.sleep(0.01)

    (recorded,) = store.append("account", "a1", [AccountOpened(owner="a")], expected_version=0)
    while not _effects(consumer.name):
        assert time.monotonic() < deadline, "not woken: only a NOTIFY can wake a 1-hour poll"
        time.sleep(0.01)
    stop.set()
    store.append("account", "a1", [Deposited(amount_cents=1, memo="")], expected_version=1)
    runner.join(30)

    assert _effects(consumer.name)[recorded.position] == 1
    assert not runner.is_alive()


def _checkpoint_exists(name: str) -> bool:
    return Checkpoint.objects.filter(name=name).exists()


@pytest.mark.smoke
@pytest.mark.django_db
def test_the_in_process_listener_wakes_on_commit(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL wakes through NOTIFY, tested with real commits above")
    with Listener() as listener:
        with django_capture_on_commit_callbacks(execute=True):
            store.append("account", "a1", [AccountOpened(owner="ada")], expected_version=0)
        woken = listener.wait(0)

    assert woken is True
