"""Request fields that take a JSON value only of their own type.

DRF coerces: ``"name": 10**30`` becomes the string ``"1000…"``, ``"gpus_per_node": "2"``
the integer 2, ``"preemptible": "yes"`` True, and an integer a UUID. A client that sends the
wrong type has a bug we should tell it about, so every writable field of a request serializer
is one of these (``tests/api/test_conventions.py`` holds it). Query parameters are strings by
nature and are parsed where they are read.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from rest_framework import serializers

# No request names more projects than this (of a member, of an invitation).
MAX_LIST_ITEMS = 200
JSON_TYPE_NAMES = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


def json_type_name(value: Any) -> str:
    for kind, name in JSON_TYPE_NAMES.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


class StrictType:
    """Refuses a value whose JSON type is not ``accepts``, before the field's own parsing."""

    accepts: ClassVar[tuple[type, ...]] = (str,)
    expected: ClassVar[str] = "a string"

    def to_internal_value(self, data: Any) -> Any:
        wrong_bool = isinstance(data, bool) and bool not in self.accepts
        if wrong_bool or not isinstance(data, self.accepts):
            raise serializers.ValidationError(
                f"Expected {self.expected}, got {json_type_name(data)}.", code="type"
            )
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictCharField(StrictType, serializers.CharField):
    pass


class StrictSlugField(StrictType, serializers.SlugField):
    pass


class StrictEmailField(StrictType, serializers.EmailField):
    pass


class StrictChoiceField(StrictType, serializers.ChoiceField):
    pass


class StrictUUIDField(StrictType, serializers.UUIDField):
    pass


class StrictDateTimeField(StrictType, serializers.DateTimeField):
    pass


class StrictPrimaryKeyRelatedField(StrictType, serializers.PrimaryKeyRelatedField):  # type: ignore[type-arg]
    """A reference by id: the id as a string (an integer would be read as a UUID)."""


class StrictIntegerField(StrictType, serializers.IntegerField):
    accepts = (int,)
    expected = "an integer"


class StrictFloatField(StrictType, serializers.FloatField):
    accepts = (int, float)
    expected = "a number"


class StrictBooleanField(StrictType, serializers.BooleanField):
    accepts = (bool,)
    expected = "a boolean"


class StrictDecimalField(StrictType, serializers.DecimalField):
    """A decimal as a string (exact) or a JSON number."""

    accepts = (str, int, float)
    expected = "a decimal string or a number"


class UniqueListField(serializers.ListField):
    """A list whose items are each given once: a repeated item is a client's mistake."""

    def to_internal_value(self, data: Any) -> list[Any]:
        items: list[Any] = super().to_internal_value(data)
        seen: set[Hashable] = set()
        for item in items:
            if item in seen:
                raise serializers.ValidationError(f"{item} is given twice.", code="duplicate")
            seen.add(item)
        return items


class StrictListField(serializers.ListField):
    """A list whose items may repeat (an argv); only a list, bounded by ``max_length``."""

    def __init__(self, **kwargs: Any) -> None:
        assert kwargs.get("max_length") is not None  # noqa: S101 (a bound is the point)
        super().__init__(**kwargs)


class StrictDictField(serializers.DictField):
    """An object of at most ``max_length`` keys (DRF's has no bound of its own)."""

    def __init__(self, *, max_length: int, **kwargs: Any) -> None:
        self.max_length = max_length
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and len(data) > self.max_length:
            raise serializers.ValidationError(
                f"At most {self.max_length} entries.", code="max_length"
            )
        return super().to_internal_value(data)
