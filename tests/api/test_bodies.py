"""``RequestSerializer``: a name the body does not take is refused, whatever kind of field it
would shadow, and the answer stays small whatever the body."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from neocloud.api.bodies import (
    MAX_NAME_SHOWN,
    MAX_REPORTED,
    UNKNOWN_FIELD,
    RequestSerializer,
    unknown_fields,
)
from neocloud.api.errors import exception_handler


class Probe(RequestSerializer):
    name = serializers.CharField()
    id = serializers.CharField(read_only=True)
    owner = serializers.HiddenField(default="someone")


def _errors(data: Any) -> Any:
    probe = Probe(data=data)
    assert not probe.is_valid()
    return probe.errors


def test_a_read_only_or_hidden_field_cannot_be_set_by_naming_it() -> None:
    assert _errors({"name": "a", "id": "x", "owner": "me"}) == {
        "id": ["Unknown field."],
        "owner": ["Unknown field."],
    }


def test_unknown_names_are_reported_before_the_fields_it_does_take() -> None:
    assert _errors({"nmae": "a"}) == {"nmae": ["Unknown field. Did you mean name?"]}


def test_the_body_it_takes_passes_and_a_non_object_is_the_usual_error() -> None:
    probe = Probe(data={"name": "a"})
    assert probe.is_valid(), probe.errors
    assert probe.validated_data == {"name": "a", "owner": "someone"}
    assert _errors(["name"]) == {
        "non_field_errors": ["Invalid data. Expected a dictionary, but got list."]
    }


def test_a_body_of_many_long_unknown_names_gets_a_short_answer() -> None:
    errors = _errors({"name": "a", **{f"{i:04}" + "x" * 1000: 1 for i in range(500)}})

    assert len(errors) == MAX_REPORTED
    assert {len(name) for name in errors} == {MAX_NAME_SHOWN}


def test_unknown_fields_are_found_at_any_depth_of_the_codes() -> None:
    codes = {
        "gpu_count": ["unknown_field"],
        "name": ["blank"],
        "reservation": {"size": ["unknown_field"], "gpus": ["min_value"]},
        "items": [{}, {"colour": ["unknown_field"]}],
        "command": {0: ["blank"]},
    }

    assert unknown_fields(codes) == ["gpu_count", "reservation.size", "items.1.colour"]


def test_the_message_names_a_few_of_many_unknown_fields() -> None:
    many = serializers.ValidationError(
        {f"f{i:02}": [ErrorDetail("Unknown field.", code=UNKNOWN_FIELD)] for i in range(30)}
    )

    response = exception_handler(many, {})

    assert response is not None
    error = response.data["error"]
    assert error["code"] == UNKNOWN_FIELD
    assert error["message"] == (
        "Not a field of this request: " + ", ".join(f"f{i:02}" for i in range(20)) + " and 10 more."
    )
    assert len(error["fields"]) == 30
