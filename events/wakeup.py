"""Waking consumers when the log grows, and long polls when what they wait for may have.

On PostgreSQL a trigger on the log sends ``NOTIFY neocloud_events`` after every INSERT
(migration 0003), so the notification is delivered exactly when the events become visible;
a ``Listener`` blocks on LISTEN. On SQLite (one process, the embedded default) the
announcement is an in-process condition signalled on commit. Either way, ``wait`` also
returns after its timeout: polling is the fallback, never the pace.

Long polls wait in coroutines, thousands at once, so they share one LISTEN connection a
process (``Topic.wait``): a thread of its own turns each notification of a channel into its
topic (``channel`` or ``channel:payload``) and wakes the coroutines subscribed to it, on
whichever event loop each runs. ``notify`` sends a topic of a channel of ``CHANNELS`` when
the current transaction commits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import suppress
from types import TracebackType
from typing import Any

import psycopg
from django.db import connection, transaction

CHANNEL = "neocloud_events"
OUTPUT_CHANNEL = "neocloud_output"  # payload: the workload whose output grew or may end
CHANNELS = (CHANNEL, OUTPUT_CHANNEL)
RECONNECT_S = 1.0
TICK_S = 0.5  # how soon a listening nobody needs any more ends

logger = logging.getLogger(__name__)

_condition = threading.Condition()
_generation = 0


def announce() -> None:
    """Wake in-process listeners when the current transaction commits (PostgreSQL's trigger
    does this for every process)."""
    if connection.vendor != "postgresql":
        transaction.on_commit(_signal_local)


def _signal_local() -> None:
    global _generation
    with _condition:
        _generation += 1
        _condition.notify_all()
    _topics.wake(CHANNEL)


def notify(channel: str, payload: str) -> None:
    """Wake the subscribers of ``channel:payload`` in every process once the current
    transaction commits (NOTIFY is transactional; SQLite's one process is woken on commit)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])
    else:
        transaction.on_commit(lambda: _topics.wake(f"{channel}:{payload}"))


class Listener:
    """A dedicated connection LISTENing for appends (or the in-process signal)."""

    def __init__(self) -> None:
        self._connection: psycopg.Connection[Any] | None = None
        self._seen = _generation

    def __enter__(self) -> Listener:
        if connection.vendor == "postgresql":
            self._connection = psycopg.connect(**psycopg_params(), autocommit=True)
            self._connection.execute(f"LISTEN {CHANNEL}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def wait(self, timeout: float) -> bool:
        """Block until an append is announced or ``timeout`` passes; True when woken."""
        if self._connection is not None:
            woken = False
            for _ in self._connection.notifies(timeout=timeout, stop_after=1):
                woken = True
            # Drain what else queued up: one wake-up covers every append before it.
            for _ in self._connection.notifies(timeout=0):
                pass
            return woken
        with _condition:
            if _generation == self._seen:
                _condition.wait(timeout)
            woken = _generation != self._seen
            self._seen = _generation
            return woken


def psycopg_params() -> dict[str, Any]:
    """Connection parameters of Django's default database, for a raw psycopg connection."""
    settings = connection.settings_dict
    params = {
        "dbname": settings["NAME"],
        "user": settings.get("USER"),
        "password": settings.get("PASSWORD"),
        "host": settings.get("HOST"),
        "port": settings.get("PORT"),
    }
    params.update(
        {k: v for k, v in settings.get("OPTIONS", {}).items() if k in {"sslmode", "options"}}
    )
    return {key: value for key, value in params.items() if value}


class _Topics:
    """The process's subscriptions by topic, and the thread that LISTENs for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[str, set[Subscription]] = {}
        self._listening = False

    def subscribe(self, subscription: Subscription) -> None:
        with self._lock:
            for topic in subscription.topics:
                self._subscribers.setdefault(topic, set()).add(subscription)
            start = not self._listening and connection.vendor == "postgresql"
            self._listening = self._listening or start
        if start:
            listen = threading.Thread(
                target=self._listen, args=(psycopg_params(),), name="wakeup", daemon=True
            )
            listen.start()

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            for topic in subscription.topics:
                subscribers = self._subscribers.get(topic)
                if subscribers is not None:
                    subscribers.discard(subscription)
                    if not subscribers:
                        del self._subscribers[topic]

    def wake(self, topic: str | None = None) -> None:
        """Wake the topic's subscribers (``None``: everyone's)."""
        with self._lock:
            if topic is None:
                woken = {s for subscribers in self._subscribers.values() for s in subscribers}
            else:
                woken = set(self._subscribers.get(topic, ()))
        for subscription in woken:
            subscription.wake()

    def _listen(self, params: dict[str, Any]) -> None:
        """LISTEN while anyone is subscribed (then the connection is closed, within
        ``TICK_S``); after a lost connection, everyone is woken once (what was notified
        meanwhile is lost) and it connects again."""
        while True:
            try:
                with psycopg.connect(**params, autocommit=True) as listening:
                    for channel in CHANNELS:
                        listening.execute(f"LISTEN {channel}")
                    self.wake()
                    while self._anyone():
                        for note in listening.notifies(timeout=TICK_S):
                            payload = f":{note.payload}" if note.payload else ""
                            self.wake(f"{note.channel}{payload}")
                    return
            except psycopg.Error:
                logger.warning("wake-up connection lost; connecting again", exc_info=True)
            time.sleep(RECONNECT_S)
            if not self._anyone():
                return

    def _anyone(self) -> bool:
        """Whether anyone is subscribed; if not, the listening stops (under the lock, so a
        subscriber that comes next starts it again)."""
        with self._lock:
            self._listening = bool(self._subscribers)
            return self._listening


_topics = _Topics()


class Subscription:
    """A coroutine's interest in topics, from before it first reads what they announce (so
    nothing announced after that read is missed) until it is closed."""

    def __init__(self, topics: tuple[str, ...]) -> None:
        self.topics = topics
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def __enter__(self) -> Subscription:
        _topics.subscribe(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _topics.unsubscribe(self)

    def wake(self) -> None:
        # A request served under WSGI runs on a loop of its own, closed once it answered.
        with suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """Until a topic is announced (since the last wait) or ``timeout``; True when woken."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True
