"""API shapes of batch submission (``POST /api/v1/workloads/batch``): a job array (the
single submission's body with ``array: {"count": N}`` beside it) or a list of such bodies
(``items``), and the answer, compact because a batch may hold 10,000 workloads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from neocloud.api.bodies import RequestSerializer
from neocloud.api.fields import StrictIntegerField
from neocloud.core.errors import ApplicationError, ValidationFailed
from scheduler.serializers import WorkloadCreateSerializer, workload_spec_of
from scheduler.services.batch import MAX_BATCH, ItemProblem, batch_refused, item_problems
from scheduler.specs import WorkloadSpec
from tenants.models import Project


class ArraySerializer(RequestSerializer):
    count = StrictIntegerField(
        min_value=1, max_value=MAX_BATCH, help_text="tasks; each is told its index"
    )


class WorkloadBatchSerializer(RequestSerializer):
    """``array`` with one workload's fields beside it (those of POST /api/v1/workloads), or
    ``items``: one of the two. ``projects``: the projects an item may name (the caller's);
    another is "does not exist", as a single submission has it."""

    closed_schema = False
    array = ArraySerializer(required=False)
    items = WorkloadCreateSerializer(  # type: ignore[call-arg]
        many=True,
        required=False,
        min_length=1,
        max_length=MAX_BATCH,
        help_text="workloads, each the body of POST /api/v1/workloads",
    )

    def __init__(self, *args: Any, projects: QuerySet[Project] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if projects is not None:
            item: Any = self.fields["items"]
            item.child.fields["project"].queryset = projects

    def accepted_names(self, data: Mapping[str, Any]) -> set[str]:
        """Beside ``array``, the workload's own fields (``array_spec_of`` checks them)."""
        accepted = super().accepted_names(data)
        if "array" in data:
            accepted |= WorkloadCreateSerializer().accepted_names(data)
        return accepted


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


def batch_of(serializer: WorkloadBatchSerializer) -> dict[str, Any]:
    """The validated batch; its items' refusals gathered into one ``BatchRefused`` naming
    item and field, the rest of what is wrong as any request's ``invalid``."""
    given = serializer.initial_data
    if not isinstance(given, dict) or ("array" in given) == ("items" in given):
        raise ValidationFailed(
            "give either array (with the workload's fields) or items",
            fields={"array": ["array_or_items"], "items": ["array_or_items"]},
        )
    if serializer.is_valid():
        return dict(serializer.validated_data)
    errors = dict(serializer.errors)
    per_item = errors.get("items")
    if (
        set(errors) == {"items"}
        and isinstance(per_item, dict)
        and per_item
        and all(isinstance(index, int) for index in per_item)
    ):
        # DRF keys a list's errors by the index of each refused item.
        raise batch_refused(
            [p for index in sorted(per_item) for p in _field_problems(index, per_item[index])]
        )
    raise ValidationError(errors)


def items_of(data: dict[str, Any], raw: Any) -> list[tuple[Project, WorkloadSpec]]:
    """Each validated item's project and spec (``raw``: the request's items, to tell what
    each gave); an offering's refusal is the item's, gathered into one ``BatchRefused``."""
    items: list[tuple[Project, WorkloadSpec]] = []
    problems: list[ItemProblem] = []
    for index, (validated, body) in enumerate(zip(data["items"], raw, strict=True)):
        validated = dict(validated)
        project: Project = validated.pop("project")
        try:
            items.append((project, workload_spec_of(validated, body)))
        except ApplicationError as error:
            problems += item_problems(index, error)
    if problems:
        raise batch_refused(problems)
    return items


def _field_problems(index: int, detail: Any) -> list[ItemProblem]:
    return [
        ItemProblem(index, field, getattr(first, "code", "invalid"), str(first))
        for field, problems in detail.items()
        for first in [problems[0] if isinstance(problems, list) and problems else problems]
    ]
