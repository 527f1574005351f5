"""Long polls that hold no worker while they wait.

A long-poll endpoint is an async view around the API's sync one (``serve``). The sync view
validates, authorises and answers at once, or, when there is nothing new yet, answers
``Waiting``: the topics that announce a change (``events.wakeup``), a short read that says
whether the answer is worth sending, and how long the caller may wait. The coroutine then
waits on the topics, holding neither a thread nor a database connection, reads again when
woken (or every ``FALLBACK_S``, should a notification be lost), and finally has the sync view
answer (``waited=True``).

Every read runs on ``READERS`` threads of the process's own, and each closes its connection
after it: however many wait, a process reads with at most ``READERS`` connections, and a
heartbeat, served on a thread of its own, never queues behind them.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from events import wakeup
from execution.errors import TooManyFollows

T = TypeVar("T")
READERS = 4
FALLBACK_S = 10.0
# A wait lasts between this share of what was asked and all of it: waiters that came together
# (a fleet's agents, a thousand follows) then end, and come back, spread out.
JITTER = 0.8

_readers = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="longpoll")


def node_topics() -> tuple[str, ...]:
    """What announces a change of a node's listing: any append to the log."""
    return (wakeup.CHANNEL,)


def output_topics(workload_id: object) -> tuple[str, ...]:
    """What announces a workload's new output, or its end."""
    return (f"{wakeup.OUTPUT_CHANNEL}:{workload_id}",)


class Waiting(HttpResponse):
    """The sync view's "nothing yet": never sent, ``serve`` waits on it instead, for
    ``wait_s`` drawn between ``JITTER`` and all of the asked wait. ``release`` runs once the
    wait is over, whichever way it ends."""

    def __init__(
        self,
        *,
        topics: tuple[str, ...],
        ready: Callable[[], bool],
        wait_s: float,
        release: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(status=204)
        self.topics = topics
        self.ready = ready
        self.wait_s = wait_s * random.uniform(JITTER, 1.0)  # noqa: S311 (a spread, no secret)
        self.release = release


def _closing(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return function(*args, **kwargs)
    finally:
        connections.close_all()  # this thread's connections go back after every read


async def read(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function`` on one of the ``READERS`` threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_readers, partial(_closing, function, *args, **kwargs))


async def serve(view: Callable[..., HttpResponseBase], request: HttpRequest, **kwargs: Any) -> Any:
    """The sync ``view``'s answer, once it has one worth sending (see the module)."""
    answer = await read(view, request, **kwargs)
    if not isinstance(answer, Waiting):
        return answer
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + answer.wait_s
        # Subscribed before the first read: whatever is announced after it wakes us.
        with wakeup.Subscription(answer.topics) as subscription:
            while not await read(answer.ready):
                left = deadline - loop.time()
                if left <= 0:
                    break
                await subscription.wait(min(left, FALLBACK_S))
    finally:
        answer.release()
    return await read(view, request, waited=True, **kwargs)


def async_view(view: Callable[..., HttpResponseBase]) -> Callable[..., Any]:
    """The DRF ``view`` (``as_view()``'s) served by ``serve``; it keeps the view's attributes,
    so the routes and the schema still see the DRF view."""

    async def waiting(request: HttpRequest, **kwargs: Any) -> Any:
        return await serve(view, request, **kwargs)

    for name in ("cls", "initkwargs", "actions", "csrf_exempt", "__doc__"):
        if hasattr(view, name):
            setattr(waiting, name, getattr(view, name))
    return waiting


# --- how many follow at once -------------------------------------------------------------------

_following: Counter[str] = Counter()
_following_lock = threading.Lock()


def follow_slot(*, caller: str, organization_id: object) -> Callable[[], None]:
    """Take a slot of the caller's (an API key or a user) and of the organization's concurrent
    follows, or raise ``TooManyFollows``; returns the slot's release. Counted per web process
    (a process that dies takes its slots with it), so a deployment of N processes allows up to
    N times the settings."""
    scopes = [
        (f"caller:{caller}", int(settings.LOG_FOLLOWS_PER_KEY)),
        (f"organization:{organization_id}", int(settings.LOG_FOLLOWS_PER_ORGANIZATION)),
    ]
    with _following_lock:
        if any(_following[scope] >= limit for scope, limit in scopes):
            raise TooManyFollows(
                "too many logs follows open at once for this key or organization: end one,"
                " or read without follow",
                details={
                    "limit_per_key": settings.LOG_FOLLOWS_PER_KEY,
                    "limit_per_organization": settings.LOG_FOLLOWS_PER_ORGANIZATION,
                },
            )
        _following.update(scope for scope, _ in scopes)
    released = threading.Event()

    def release() -> None:
        with _following_lock:
            if not released.is_set():
                released.set()
                _following.subtract(scope for scope, _ in scopes)
                for scope, _ in scopes:
                    if _following[scope] <= 0:
                        del _following[scope]

    return release
