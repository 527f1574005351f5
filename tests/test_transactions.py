"""Lock order and retries (``neocloud.core.transactions``), on PostgreSQL with real commits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection, transaction

from events import store
from events.models import Checkpoint
from inventory.models import Node
from neocloud.core.transactions import TransactionConflict, atomic_with_retry, row_lock
from tests.ledger.events import AccountOpened

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_two_transactions_that_deadlock_are_both_run_again_until_they_commit() -> None:
    """A real deadlock: each locks one row, then the other's. PostgreSQL aborts one; it is
    run again and commits, and so does the other."""
    Checkpoint.objects.bulk_create([Checkpoint(name="a"), Checkpoint(name="b")])
    both_hold_one = threading.Barrier(2)
    attempts = {"a": 0, "b": 0}
    errors: list[BaseException] = []

    def lock_then_bump(first: str, second: str) -> None:
        attempts[first] += 1
        row_lock(Checkpoint.objects.filter(name=first)).get()
        if attempts[first] == 1:
            both_hold_one.wait()
        row_lock(Checkpoint.objects.filter(name=second)).get()
        Checkpoint.objects.filter(name=first).update(position=attempts[first])

    def client(first: str, second: str) -> None:
        try:
            atomic_with_retry(lock_then_bump, first, second)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=client, args=("a", "b")),
        threading.Thread(target=client, args=("b", "a")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(attempts.values()) == [1, 2]  # the deadlock's victim ran twice
    assert dict(Checkpoint.objects.values_list("name", "position")) == attempts


def test_a_deadlock_met_inside_an_append_is_run_again() -> None:
    """The victim waits for the append lock inside ``store.append`` while holding a row the
    lock's holder wants: it is aborted there, and run again."""
    Checkpoint.objects.create(name="a")
    holds_row = threading.Barrier(2)
    attempts = {"appender": 0}
    errors: list[BaseException] = []

    def lock_row_then_append() -> None:
        attempts["appender"] += 1
        row_lock(Checkpoint.objects.filter(name="a")).get()
        if attempts["appender"] == 1:
            holds_row.wait()
        store.append("account", "acc-1", [AccountOpened(owner="o")], expected_version=store.ANY)

    def hold_append_lock_then_lock_row() -> None:
        store.take_append_lock()
        holds_row.wait()
        time.sleep(0.3)  # the appender waits first, so its deadlock check finds the cycle
        row_lock(Checkpoint.objects.filter(name="a")).get()

    def client(work: Callable[[], None]) -> None:
        try:
            atomic_with_retry(work)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=client, args=(lock_row_then_append,)),
        threading.Thread(target=client, args=(hold_append_lock_then_lock_row,)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert attempts == {"appender": 2}
    assert [e.type for e in store.read_stream("account", "acc-1")] == [AccountOpened.event_type]


def test_a_deadlock_on_every_attempt_is_a_retryable_409() -> None:
    calls = []

    def always_deadlocks() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = 'deadlock_detected'; END $$"
            )

    with pytest.raises(TransactionConflict) as raised:
        atomic_with_retry(always_deadlocks)

    assert (raised.value.code, raised.value.http_status, raised.value.retryable) == (
        "transaction_conflict",
        409,
        True,
    )
    assert len(calls) == 3


def test_inside_an_outer_transaction_a_deadlock_is_not_retried() -> None:
    calls = []

    def deadlocks() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = 'deadlock_detected'; END $$"
            )

    with pytest.raises(Exception, match="deadlock"), transaction.atomic():
        atomic_with_retry(deadlocks)
    assert len(calls) == 1


def test_a_row_lock_locks_its_own_row_only_and_leaves_foreign_keys_to_it_free() -> None:
    """``Node``'s ordering joins its cluster: ``FOR UPDATE`` would lock the cluster's row,
    and block every foreign-key check on it made under the append lock."""
    with transaction.atomic():
        sql = str(row_lock(Node.objects.filter(name="n1"))[:1].query)
    assert 'JOIN "inventory_cluster"' in sql
    assert sql.endswith('FOR NO KEY UPDATE OF "inventory_node"')


def test_every_row_lock_goes_through_row_lock() -> None:
    """The order in ``neocloud.core.transactions`` holds only if nothing locks rows around it
    (``events`` locks its consumers' checkpoints itself)."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in ROOT.iterdir()
        if package.is_dir() and (package / "apps.py").exists() and package.name != "events"
        for path in package.rglob("*.py")
        if "select_for_update(" in path.read_text() and path.name != "transactions.py"
    ]
    assert offenders == []
