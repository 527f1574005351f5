"""The "Start a GPU dev environment" form (issue 32): a workload of kind ``dev``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms

from console.selectors.submit import FormChoices


class DevForm(forms.Form):
    project = forms.ChoiceField()
    name = forms.CharField(max_length=128, initial="dev")
    gpu_model = forms.ChoiceField(required=False, label="GPU model")
    gpus = forms.IntegerField(initial=1, min_value=1, label="GPUs")
    image = forms.CharField(
        required=False, label="Image", help_text="An OCI reference; empty: the node's environment."
    )
    idle_stop_min = forms.FloatField(
        required=False,
        min_value=0,
        label="Idle stop (minutes)",
        help_text="Stopped after this long without an SSH session and without GPU use; empty:"
        " the operator's default.",
    )

    def __init__(
        self, data: Mapping[str, Any] | None = None, *, choices: FormChoices, **kwargs: Any
    ) -> None:
        super().__init__(data, **kwargs)
        self.fields["project"].choices = choices.projects  # type: ignore[attr-defined]
        self.fields["gpu_model"].choices = [("", "any"), *choices.gpu_models]  # type: ignore[attr-defined]

    def request_data(self) -> dict[str, Any]:
        """The API's request body (call once the form is valid)."""
        given = self.cleaned_data
        data: dict[str, Any] = {
            "project": given["project"],
            "name": given["name"],
            "kind": "dev",
            "gpu_models": [given["gpu_model"]] if given["gpu_model"] else [],
            "gpus_per_node": given["gpus"],
        }
        if given["image"].strip():
            data["image"] = given["image"].strip()
        if given["idle_stop_min"] is not None:
            data["idle_stop_s"] = given["idle_stop_min"] * 60
        return data
