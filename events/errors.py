"""Errors of the event store."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, LostRace


class StreamConflict(LostRace):
    """The stream moved since the caller read it: re-read and decide again."""

    code = "stream_conflict"

    def __init__(self, stream_type: str, stream_id: str, expected: int | None, actual: int) -> None:
        wanted = (
            "any version"
            if expected is None
            else ("no stream" if expected == 0 else f"version {expected}")
        )
        super().__init__(
            f"stream {stream_type}/{stream_id} is at version {actual}, expected {wanted}",
            details={
                "stream_type": stream_type,
                "stream_id": stream_id,
                "expected_version": expected,
                "actual_version": actual,
            },
        )
        self.actual_version = actual


class UnknownEventType(ApplicationError):
    """An event of a type nothing registered: a bug, never the caller's."""

    code = "unknown_event_type"
    http_status = 500


class MalformedEvent(ApplicationError):
    """An event's payload does not validate against its type: a bug, never the caller's."""

    code = "malformed_event"
    http_status = 500


class MissingUpcaster(ApplicationError):
    """A stored payload's schema version has no upcaster to the current one: a bug."""

    code = "missing_upcaster"
    http_status = 500
