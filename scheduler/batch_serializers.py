"""API shapes of batch submission (``POST /api/v1/workloads/batch``): a job array (the
single submission's body with ``array: {"count": N}`` beside it) or a list of such bodies
(``items``), and the answer, compact because a batch may hold 10,000 workloads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from neocloud.api.fields import StrictIntegerField, StrictListField
from neocloud.core.errors import ApplicationError, ValidationFailed
from scheduler.serializers import WorkloadCreateSerializer, workload_spec_of
from scheduler.services.batch import MAX_BATCH, ItemProblem, batch_refused, item_problems
from scheduler.specs import WorkloadSpec
from tenants.models import Project


class ArraySerializer(serializers.Serializer):  # type: ignore[type-arg]
    count = StrictIntegerField(
        min_value=1, max_value=MAX_BATCH, help_text="tasks; each is told its index"
    )


class WorkloadBatchSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """``array`` with one workload's fields beside it, or ``items``: one of the two."""

    array = ArraySerializer(required=False)
    items = StrictListField(
        child=serializers.DictField(),
        required=False,
        min_length=1,
        max_length=MAX_BATCH,
        help_text="workloads, each the body of POST /api/v1/workloads",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("array" in attrs) == ("items" in attrs):
            raise ValidationFailed(
                "give either array (with the workload's fields) or items",
                fields={"array": ["array_or_items"], "items": ["array_or_items"]},
            )
        return attrs


class BatchWorkloadSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.UUIDField(source="workload_id")
    name = serializers.CharField()
    project = serializers.UUIDField(source="project_id")
    array_index = serializers.IntegerField(allow_null=True)


class BatchResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    array_id = serializers.UUIDField(allow_null=True)
    count = serializers.SerializerMethodField()
    workloads = BatchWorkloadSerializer(many=True)

    def get_count(self, batch: Any) -> int:
        return len(batch.workloads)


Validate = Callable[[type[serializers.Serializer], Any], dict[str, Any]]  # type: ignore[type-arg]


def array_spec_of(data: Any, validate: Validate) -> tuple[Project, WorkloadSpec]:
    """The project and the one spec of an array's body (its fields beside ``array``)."""
    body = {k: v for k, v in data.items() if k != "array"}
    validated = validate(WorkloadCreateSerializer, body)
    project: Project = validated.pop("project")
    return project, workload_spec_of(validated, body)


def items_of(raw: list[Any], validate: Validate) -> list[tuple[Project, WorkloadSpec]]:
    """Each item's project and spec, validated as ``POST /api/v1/workloads`` validates its
    body; every refusal is gathered into one ``BatchRefused`` naming item and field."""
    items: list[tuple[Project, WorkloadSpec]] = []
    problems: list[ItemProblem] = []
    for index, body in enumerate(raw):
        try:
            validated = validate(WorkloadCreateSerializer, body)
            project: Project = validated.pop("project")
            items.append((project, workload_spec_of(validated, body)))
        except ValidationError as error:
            problems += _field_problems(index, error.detail)
        except ApplicationError as error:
            problems += item_problems(index, error)
    if problems:
        raise batch_refused(problems)
    return items


def _field_problems(index: int, detail: Any) -> list[ItemProblem]:
    if not isinstance(detail, dict):
        return [ItemProblem(index, None, "invalid", str(detail))]
    return [
        ItemProblem(index, field, getattr(first, "code", "invalid"), str(first))
        for field, problems in detail.items()
        for first in [problems[0] if isinstance(problems, list) and problems else problems]
    ]
