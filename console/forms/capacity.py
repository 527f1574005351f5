"""A reservation, as ``POST /api/v1/reservations`` takes it: the service checks the rest."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet

from inventory.models import GpuModel, Region
from neocloud.core.errors import ApplicationError
from scheduler.specs import MAX_RESERVED_GPUS
from tenants.models import Project

WINDOW_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
# The service's names for what this form calls otherwise.
SERVICE_FIELDS = {"gpu_models": "gpu_model"}


class WindowInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self) -> None:
        super().__init__(format="%Y-%m-%dT%H:%M")


class ReservationForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), empty_label=None)
    gpu_model = forms.ChoiceField(label="GPU model")
    gpus = forms.IntegerField(label="GPUs", min_value=1, max_value=MAX_RESERVED_GPUS)
    starts_at = forms.DateTimeField(
        label="Starts (UTC)", input_formats=WINDOW_FORMATS, widget=WindowInput()
    )
    ends_at = forms.DateTimeField(
        label="Ends (UTC)", input_formats=WINDOW_FORMATS, widget=WindowInput()
    )
    region = forms.ChoiceField(label="Region", required=False)

    def __init__(self, *args: Any, projects: QuerySet[Project], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        project: Any = self.fields["project"]  # the stubs type `queryset` as a descriptor
        project.queryset = projects.order_by("name")
        project.label_from_instance = lambda p: p.name  # str() would read its organization
        gpu_model: Any = self.fields["gpu_model"]
        gpu_model.choices = [(m.slug, f"{m.name} ({m.slug})") for m in GpuModel.objects.all()]
        region: Any = self.fields["region"]
        region.choices = [("", "Any"), *((r.slug, r.name) for r in Region.objects.all())]

    def service_arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``reservation_create``, from valid data."""
        data = self.cleaned_data
        return {
            "project": data["project"],
            "gpu_model": data["gpu_model"],
            "gpus": data["gpus"],
            "starts_at": data["starts_at"],
            "ends_at": data["ends_at"],
            "region": data["region"] or None,
        }

    def refused(self, error: ApplicationError) -> None:
        """Show the service's refusal beside the field it names, else above the form (its
        ``fields`` hold codes or sentences; its message is always the sentence)."""
        named = [SERVICE_FIELDS.get(name, name) for name in error.fields]
        field = next((name for name in named if name in self.fields), None)
        self.add_error(field, error.message)
