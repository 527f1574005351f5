"""The workload list's filters: choices the member may pick from, anything else refused."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms

from console.selectors.workloads import Filters
from inventory.models import GpuModel
from scheduler.models import WorkloadStatus
from tenants.models import Project


class WorkloadFilterForm(forms.Form):
    project = forms.ChoiceField(required=False)
    status = forms.ChoiceField(
        required=False, choices=[("", "Any status"), *WorkloadStatus.choices]
    )
    gpu_model = forms.ChoiceField(required=False, label="GPU model")

    def __init__(self, data: Any, *, projects: list[Project], gpu_models: list[GpuModel]) -> None:
        super().__init__(data)
        project = self.fields["project"]
        model = self.fields["gpu_model"]
        assert isinstance(project, forms.ChoiceField)  # noqa: S101 - declared above
        assert isinstance(model, forms.ChoiceField)  # noqa: S101
        project.choices = [("", "Any project"), *((str(p.pk), p.name) for p in projects)]
        model.choices = [("", "Any GPU model"), *((m.slug, m.name) for m in gpu_models)]

    def filters(self) -> Filters:
        """The filters asked for, once ``is_valid``: only offered choices pass."""
        data = self.cleaned_data
        return Filters(
            project=uuid.UUID(data["project"]) if data["project"] else None,
            status=data["status"],
            gpu_model=data["gpu_model"],
        )
