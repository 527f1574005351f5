"""What a refused fleet file says: every problem found, by its place in the file.

A place is a path such as ``regions[0].clusters[1].racks[0].nodes[2].gpu_model`` (``(file)``
for the whole file, ``line 9.model`` in a CSV). The paths and messages are the CLI's
contract: ``manage.py import_fleet`` prints them, scripts and tests read them. The formats are
pydantic models; ``Problems.add_errors`` words pydantic's errors in the file's terms, and
``problem`` / ``problems_at`` are how our own validators raise theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from pydantic import ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from neocloud.core.errors import ValidationFailed

MAX_PROBLEMS_SHOWN = 20  # in the message; ``fields`` has them all

Loc = tuple[str | int, ...]


class FleetInvalid(ValidationFailed):
    """The fleet file is wrong; ``fields`` maps each place in the file to its problems."""

    code = "fleet_invalid"

    @classmethod
    def of(cls, problems: Mapping[str, list[str]]) -> FleetInvalid:
        lines = [
            f"{path}: {message}" for path, messages in problems.items() for message in messages
        ]
        shown = lines[:MAX_PROBLEMS_SHOWN]
        if len(lines) > len(shown):
            shown.append(f"... and {len(lines) - len(shown)} more")
        return cls(
            f"{len(lines)} problem{'s' if len(lines) != 1 else ''} in the fleet file,"
            " nothing imported:\n" + "\n".join(f"  {line}" for line in shown),
            fields={path: list(messages) for path, messages in problems.items()},
        )


def problem(message: str) -> PydanticCustomError:
    """A problem of the value being validated, worded for the file's reader."""
    return PydanticCustomError("fleet", "{message}", {"message": message})


def problems_at(title: str, found: Iterable[tuple[Loc, str]]) -> ValidationError:
    """Problems at places inside the value being validated (a model validator's, whose rules
    span fields): pydantic puts each at its place in the file."""
    return ValidationError.from_exception_data(
        title,
        [InitErrorDetails(type=problem(message), loc=loc, input=None) for loc, message in found],
    )


def path_of(loc: Loc, prefix: str = "") -> str:
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else part
    return path


def kind(value: object) -> str:
    """What the file has where it should have something else."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int | float):
        return f"a number ({value})"
    return f"{type(value).__name__} {value!r}"


def _message(error: ErrorDetails, known_fields: Callable[[Loc], Collection[str]]) -> str:
    value, context = error["input"], error.get("ctx", {})
    match error["type"]:
        case "missing":
            return "required field missing"
        case "extra_forbidden":
            return f"unknown field (known: {', '.join(sorted(known_fields(error['loc'][:-1])))})"
        case "int_type":
            return f"expected a whole number, got {kind(value)}"
        case "bool_type":
            return f"expected true or false, got {kind(value)}"
        case "list_type":
            return f"expected a list, got {kind(value)}"
        case "model_type" | "dict_type":
            return f"expected a mapping, got {kind(value)}"
        case "greater_than_equal":
            return f"must be at least {context['ge']}, got {value}"
        case "less_than_equal":
            return f"must be at most {context['le']}, got {value}"
        case "too_long" | "string_too_long":
            return f"longer than {context['max_length']} characters"
        case _:  # ours (``problem``), worded already
            return error["msg"]


def _no_fields(loc: Loc) -> Collection[str]:
    return ()


class Problems:
    """Every problem found, by path, in the order found."""

    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {}

    def add(self, path: str, message: str) -> None:
        messages = self.items.setdefault(path or "(file)", [])
        if message not in messages:
            messages.append(message)

    def add_errors(
        self,
        error: ValidationError,
        *,
        prefix: str = "",
        known_fields: Callable[[Loc], Collection[str]] = _no_fields,
    ) -> None:
        """Pydantic's errors, each at its path below ``prefix``; ``known_fields`` names the
        fields of the entry at a place, for an unknown one."""
        for details in error.errors(include_url=False):
            self.add(path_of(details["loc"], prefix), _message(details, known_fields))

    def raise_if_any(self) -> None:
        if self.items:
            raise FleetInvalid.of(self.items)
