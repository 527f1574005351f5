"""Hooks: how an app asks something of, or tells something to, the apps that depend on it,
without importing them. The app that calls a hook declares it (``scheduler.hooks``,
``inventory.hooks``); the apps that answer register a function in their
``AppConfig.ready``. docs/architecture/scheduling-service.md lists every hook.

A hook is called one of three ways, as its declaration's docstring says:

- ``call_all``: every registered function, in registration order (tell them all);
- ``first``: the first answer that is not None (ask until one answers);
- ``on_commit``: every registered function once the current transaction commits (tell them
  what the transaction did, and nothing if it rolls back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, ParamSpec, TypeVar

from django.db import transaction

P = ParamSpec("P")
R = TypeVar("R")


class Hook(Generic[P, R]):
    """Functions taking ``P`` and returning ``R``, registered by the apps that answer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._functions: list[Callable[P, R]] = []

    def __repr__(self) -> str:
        return f"Hook({self.name!r})"

    def register(self, function: Callable[P, R]) -> Callable[P, R]:
        """Add ``function`` (usable as a decorator); registering it again is a no-op."""
        if function not in self._functions:
            self._functions.append(function)
        return function

    def unregister(self, function: Callable[P, R]) -> None:
        if function in self._functions:
            self._functions.remove(function)

    @contextmanager
    def registered(self, function: Callable[P, R]) -> Iterator[Callable[P, R]]:
        """``function`` registered for the ``with`` block only (tests)."""
        self.register(function)
        try:
            yield function
        finally:
            self.unregister(function)

    def call_all(self, *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """Every function's answer, in registration order."""
        return [function(*args, **kwargs) for function in list(self._functions)]

    def first(self, *args: P.args, **kwargs: P.kwargs) -> R | None:
        """The first answer that is not None; the later functions are not called."""
        for function in list(self._functions):
            answer = function(*args, **kwargs)
            if answer is not None:
                return answer
        return None

    def on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call every function once the current transaction commits. A function that fails
        there is lost (the transaction is over): its app reconciles periodically."""
        transaction.on_commit(lambda: self.call_all(*args, **kwargs))
