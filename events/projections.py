"""Projections: tables derived from the log, and their registry.

A projection names the tables it owns and handles event types with ``@handles``. A
*synchronous* projection is applied inside ``append``'s transaction, so its tables are never
behind the log; an *asynchronous* one is a consumer with its own checkpoint. ``replay``
empties every projection's tables and applies the whole log again: what it produces must
equal the live state, which is how a projection proves it is derived from the log alone. The
few operational columns a projection's tables carry beside what the log holds
(``Projection.operational``) are kept across a replay, not rebuilt.

Apps register theirs in ``<app>/projections.py`` (imported when the app registry is ready).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.db import models
from django.db.models import Model

if TYPE_CHECKING:
    from events.types import DomainEvent, RecordedEvent

Handler = Callable[[Any, "RecordedEvent"], None]
OperationalValues = dict[type[Model], dict[Any, tuple[Any, ...]]]
H = TypeVar("H", bound=Handler)


def handles(*types: type[DomainEvent] | str) -> Callable[[H], H]:
    """Mark a projection method as the handler of these event types."""
    names = tuple(t if isinstance(t, str) else t.event_type for t in types)

    def mark(method: H) -> H:
        method._handles = names  # type: ignore[attr-defined]
        return method

    return mark


class Projection:
    """Base of a projection: handlers by event type, and the tables a rebuild empties."""

    name: ClassVar[str]
    # Emptied (in reverse order) before a replay; list parents before children.
    models: ClassVar[Sequence[type[models.Model]]] = ()
    # Events per transaction when it runs as a consumer: a projection that folds a batch into
    # bulk writes gains from larger ones (memory stays bounded by it).
    batch_size: ClassVar[int] = 500
    # Operational columns of its tables that the log does not hold (a heartbeat's time, a
    # key's last use): written in place, not events, so a replay cannot rebuild them. They
    # are kept across it instead (``operational_keep`` / ``operational_restore``).
    operational: ClassVar[dict[type[Model], tuple[str, ...]]] = {}
    _handlers: ClassVar[dict[str, Handler]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[str, Handler] = {}
        for klass in reversed(cls.__mro__):
            for attribute in vars(klass).values():
                for name in getattr(attribute, "_handles", ()):
                    handlers[name] = attribute
        cls._handlers = handlers

    @property
    def event_types(self) -> frozenset[str] | None:
        """The types this projection reads; ``None`` for every type."""
        return frozenset(self._handlers)

    def apply(self, event: RecordedEvent) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(self, event)

    def apply_batch(self, events: Iterable[RecordedEvent]) -> None:
        """Apply several events; override to fold a batch into fewer writes."""
        for event in events:
            self.apply(event)

    def reset(self) -> None:
        for model in reversed(self.models):
            model._base_manager.all().delete()

    def operational_keep(self) -> OperationalValues:
        """The operational columns' values of every row that has any, before a reset."""
        kept: OperationalValues = {}
        for model, fields in self.operational.items():
            rows = model._base_manager.exclude(**{f"{f}__isnull": True for f in fields})
            kept[model] = {row[0]: row[1:] for row in rows.values_list("pk", *fields)}
        return kept

    def operational_restore(self, kept: OperationalValues) -> None:
        """Write the kept values back onto the rebuilt rows (rows the log no longer makes
        are gone, and their values with them)."""
        for model, values in kept.items():
            fields = self.operational[model]
            rows = list(model._base_manager.filter(pk__in=list(values)).only("pk", *fields))
            for row in rows:
                for field, value in zip(fields, values[row.pk], strict=True):
                    setattr(row, field, value)
            model._base_manager.bulk_update(rows, fields, batch_size=1000)


_synchronous: dict[str, Projection] = {}
_asynchronous: dict[str, Projection] = {}


def register(projection: Projection, *, synchronous: bool) -> Projection:
    """Register ``projection`` (by name; registering the same name again replaces it)."""
    registry = _synchronous if synchronous else _asynchronous
    registry[projection.name] = projection
    return projection


def unregister(name: str) -> None:
    _synchronous.pop(name, None)
    _asynchronous.pop(name, None)


def synchronous() -> list[Projection]:
    return list(_synchronous.values())


def asynchronous() -> list[Projection]:
    return list(_asynchronous.values())


def apply_synchronous(events: Sequence[RecordedEvent]) -> None:
    """Called by ``append`` inside its transaction."""
    for projection in _synchronous.values():
        projection.apply_batch(events)
