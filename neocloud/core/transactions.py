"""Transactions: the order in which they take locks, and running them again when they lose a
race.

**Lock order.** Every write transaction takes its locks in this order, and never back:

1. *Row locks* of the rows it decides on, through ``row_lock`` only: an organization, then
   its projects; offerings, orders, billing accounts and invoices; clusters, then nodes;
   reservations; scheduler leases. (A consumer's checkpoint is locked by ``events`` itself,
   before anything its batch does: no foreign key refers to it.) ``row_lock`` is
   ``SELECT … FOR NO KEY UPDATE OF`` the row itself:

   - *of the row only* (``OF self``): a plain ``FOR UPDATE`` also locks every row of the
     tables a query joins, and a default ordering by a foreign key joins one (``Node``'s
     ordering by cluster locked the whole cluster's row with every node's);
   - *no key*: the foreign-key check of a row inserted (or updated twice) under the append
     lock takes ``FOR KEY SHARE`` on the row it references, at the latest at commit, when
     the constraint is deferred. ``FOR UPDATE`` blocks that share; ``FOR NO KEY UPDATE``
     does not, and still serialises the writers of one row. No key column is ever changed:
     rows are projections, keyed by ids from the log.

   So a transaction that holds a row and waits for the append lock never blocks the holder
   of the append lock: no ``DeadlockDetected`` between the log's lock and a foreign key.
2. The log's *append lock* (``events.store.append`` or ``take_append_lock``), held to
   commit: append late.
3. After it, only rows that scheduling cycles write under the append lock: workloads and
   their allocations (``scheduler.services`` takes the append lock before it locks a
   workload), and the projections' own writes. A check that may run after an append of the
   same transaction takes the append lock instead of a row: a reservation's capacity check
   (an order appends before it reserves).

**Retries.** ``atomic_with_retry`` runs a service in a transaction and runs it again, from
the start and on fresh state, when it lost a race that another attempt may win: a
``LostRace`` (the kernel's name for it, so that this module needs no app: the log's
``StreamConflict``, the stream moved since it was read, is one) and PostgreSQL's deadlock and
serialisation failures. The entry points (API views, admin actions, tasks, commands) call
services through it; tasks that still meet one after its attempts run again later
(``RACES``).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from django.db import OperationalError, connection, transaction
from django.db.models import Model, QuerySet
from psycopg import errors as pg_errors

from neocloud.core.errors import Conflict, LostRace

P = ParamSpec("P")
T = TypeVar("T")
M = TypeVar("M", bound=Model)

ATTEMPTS = 3
# Before another attempt after a deadlock: a random pause up to this, so the losers of one
# deadlock do not meet again at once.
BACKOFF_S = 0.05


class TransactionConflict(Conflict):
    """The database aborted the transaction to resolve a deadlock or a serialisation
    failure, every attempt: try again (HTTP 409, retryable)."""

    code = "transaction_conflict"


# What ``atomic_with_retry`` gives up on after its attempts: a task that meets one runs again
# later (Celery's ``autoretry_for``), as a client is told to (HTTP 409).
RACES: tuple[type[Exception], ...] = (LostRace, TransactionConflict)


def row_lock(queryset: QuerySet[M]) -> QuerySet[M]:
    """``queryset``'s rows, locked to the end of the transaction in the order of the module
    (``FOR NO KEY UPDATE`` of its own table only)."""
    return queryset.select_for_update(of=("self",), no_key=True)


@contextmanager
def session_try_lock(lock_class: int, key: uuid.UUID) -> Iterator[bool]:
    """PostgreSQL's session advisory lock (``lock_class``, the first 4 bytes of ``key``) if
    no other session holds it, never waiting: yields whether it was taken, and gives it back
    after. Outside a transaction's locks (a process that dies gives it back with its
    connection). Elsewhere (the embedded SQLite: one process) it is always taken."""
    if connection.vendor != "postgresql":
        yield True
        return
    pair = [lock_class, int.from_bytes(key.bytes[:4], "big", signed=True)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", pair)
        row = cursor.fetchone()
    if not (row and row[0]):
        yield False
        return
    try:
        yield True
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", pair)


def is_transient(exc: BaseException) -> bool:
    """Whether PostgreSQL aborted the transaction only to resolve a race (deadlock,
    serialisation failure): the same work may succeed when run again."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, pg_errors.DeadlockDetected | pg_errors.SerializationFailure):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def atomic_with_retry(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``function`` in a transaction; when it loses a race, run it again from the start.

    Services re-read what they decide on inside the call, so a retry decides on fresh state.
    After ``ATTEMPTS`` a ``LostRace`` is raised as it is, a deadlock or serialisation
    failure as ``TransactionConflict`` (both HTTP 409, retryable). Inside an outer
    transaction a deadlock is raised at once: the outer transaction is aborted, and only
    its own entry point can run it again.
    """
    outermost = not connection.in_atomic_block
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with transaction.atomic():
                return function(*args, **kwargs)
        except LostRace:
            if attempt == ATTEMPTS:
                raise
        except OperationalError as exc:
            if not is_transient(exc):
                raise
            if not outermost:
                raise
            if attempt == ATTEMPTS:
                raise TransactionConflict(
                    "the database aborted this change to resolve a conflict with a concurrent"
                    " one; retry",
                    details={"attempts": ATTEMPTS},
                ) from exc
            time.sleep(random.uniform(0, BACKOFF_S))  # noqa: S311 - jitter, not a secret
    raise AssertionError("unreachable")
