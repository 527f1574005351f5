"""Event types: registered, typed payloads, upcasters for older schema versions, and the
record of a stored event (``RecordedEvent``).

An app declares its events in ``<app>/events.py``::

    @event_type("scheduler.WorkloadSubmitted", schema_version=2)
    class WorkloadSubmitted(DomainEvent):
        workload_id: UUID
        gpus: int

    @upcaster("scheduler.WorkloadSubmitted", from_version=1)
    def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "gpus": data.pop("gpu_count")}

The store rejects an unregistered type or a payload that does not validate at append, and
brings every stored payload up to the current schema version when it is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from events.errors import MalformedEvent, MissingUpcaster, UnknownEventType

Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]


class DomainEvent(BaseModel):
    """Base of every event payload: immutable and validated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str]
    schema_version: ClassVar[int]


E = TypeVar("E", bound=type[DomainEvent])

_types: dict[str, type[DomainEvent]] = {}
_upcasters: dict[tuple[str, int], Upcaster] = {}


def event_type(name: str, *, schema_version: int = 1) -> Callable[[E], E]:
    """Register a payload class under its stable type name (``"<app>.<PastTense>"``)."""

    def register(cls: E) -> E:
        known = _types.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"event type {name!r} is already registered by {known!r}")
        cls.event_type = name
        cls.schema_version = schema_version
        _types[name] = cls
        return cls

    return register


def upcaster(name: str, *, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register the function that turns a ``from_version`` payload into ``from_version + 1``."""

    def register(function: Upcaster) -> Upcaster:
        _upcasters[(name, from_version)] = function
        return function

    return register


def event_class(name: str) -> type[DomainEvent]:
    try:
        return _types[name]
    except KeyError:
        raise UnknownEventType(f"unknown event type {name!r}") from None


def is_registered(name: str) -> bool:
    return name in _types


def registered() -> dict[str, type[DomainEvent]]:
    """Every registered type by name (the events reference page is written from it)."""
    return dict(_types)


def serialize(event: DomainEvent) -> tuple[str, int, Payload]:
    """Type name, schema version and JSON payload of ``event``, validated again so that an
    instance built without validation (``model_construct``) cannot slip into the log."""
    cls = type(event)
    name = getattr(cls, "event_type", "")
    if _types.get(name) is not cls:
        raise UnknownEventType(f"{cls.__qualname__} is not a registered event type")
    try:
        data = event.model_dump(mode="json", warnings=False)
        cls.model_validate(data)
    except (ValidationError, ValueError, TypeError) as exc:
        raise MalformedEvent(f"{name}: {exc}") from exc
    return name, cls.schema_version, data


def upcast(name: str, schema_version: int, data: Payload) -> tuple[int, Payload]:
    """Bring a stored payload up to the registered schema version of its type.

    A type no longer registered is returned as stored, so the log stays readable.
    """
    cls = _types.get(name)
    if cls is None:
        return schema_version, data
    current = cls.schema_version
    while schema_version < current:
        try:
            step = _upcasters[(name, schema_version)]
        except KeyError:
            raise MissingUpcaster(
                f"no upcaster for {name} from schema version {schema_version}"
            ) from None
        data = step(dict(data))
        schema_version += 1
    return schema_version, data


def deserialize(name: str, data: Payload) -> DomainEvent:
    """Validate a current-version payload into its typed event."""
    try:
        return event_class(name).model_validate(data)
    except ValidationError as exc:
        raise MalformedEvent(f"{name}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored, its payload already upcast to the current schema version (here, below
    the store, because projections receive it and the store applies projections)."""

    position: int
    stream_type: str
    stream_id: str
    version: int
    type: str
    schema_version: int
    data: Payload
    metadata: dict[str, Any]
    recorded_at: datetime

    def payload(self) -> DomainEvent:
        """The typed, validated payload."""
        return deserialize(self.type, self.data)
