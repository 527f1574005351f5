"""The new-workload form: it only turns what the page posts into the API's request
(``scheduler.serializers.WorkloadCreateSerializer``), whose fields and the services behind
them hold every rule; their errors come back beside the inputs they concern.

The command is one argument per line, exactly as typed (no shell quoting, no variables);
blank lines are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms

from console.selectors.submit import FormChoices
from neocloud.core.errors import ApplicationError
from scheduler.engine import Topology
from scheduler.services.batch import MAX_BATCH

MODEL_CHOICES = 3  # GPU models in order of preference
MODEL_FIELDS = tuple(f"gpu_model_{i}" for i in range(1, MODEL_CHOICES + 1))
# The API's fields an offering leaves to the request; the rest of its shape is the offering's.
OFFERING_FIELDS = ("quantity", "runtime_estimate_s", "priority_class", "command", "image")
# Where an error of the API's field shows on this form.
SHOWN_AT = {"gpu_models": MODEL_FIELDS[0], "gpu_model": MODEL_FIELDS[0], "array.count": "count"}


class WorkloadForm(forms.Form):
    project = forms.ChoiceField()
    name = forms.CharField(max_length=128)
    offering = forms.ChoiceField(
        required=False,
        label="Offering",
        help_text="From the catalog: its GPUs, nodes and topology; the shape below is then not"
        " used. Custom: the shape below.",
    )
    quantity = forms.IntegerField(
        required=False, label="Quantity", help_text="With an offering: instances, nodes, replicas."
    )
    gpu_model_1 = forms.ChoiceField(required=False, label="GPU model, first choice")
    gpu_model_2 = forms.ChoiceField(required=False, label="Second choice")
    gpu_model_3 = forms.ChoiceField(required=False, label="Third choice")
    gpus_per_node = forms.IntegerField(initial=1, label="GPUs per node")
    nodes = forms.IntegerField(initial=1, label="Nodes")
    min_nodes = forms.IntegerField(
        required=False,
        label="Gang minimum (nodes)",
        help_text="Start with at least this many of the nodes; empty: all of them at once.",
    )
    gpu_milli = forms.IntegerField(
        initial=1000,
        label="Share of one GPU (milli-GPU)",
        help_text="1000: whole GPUs. Less: a share of one GPU of a shareable model, on one node.",
    )
    topology = forms.ChoiceField(
        choices=[(t.value, t.value.replace("_", " ")) for t in Topology], initial=Topology.ANY
    )
    preemptible = forms.BooleanField(required=False, label="Preemptible (billed as such)")
    priority_class = forms.ChoiceField(initial="standard", label="Priority class")
    runtime_estimate_s = forms.FloatField(
        required=False,
        label="Runtime estimate (seconds)",
        help_text="Lets shorter work start in gaps (backfill); empty: unknown.",
    )
    image = forms.CharField(
        required=False, label="Image", help_text="An OCI reference; empty: the node's environment."
    )
    command = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        label="Command",
        help_text="One argument per line, exactly as typed (no shell quoting); blank lines are"
        " skipped. Empty: the image's entrypoint.",
        strip=False,
    )
    count = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_BATCH,
        label="Copies (job array)",
        help_text="Run this many copies as one array, each told its index in"
        " NEOCLOUD_ARRAY_INDEX; all are submitted or none. Empty: one workload.",
    )

    def __init__(
        self, data: Mapping[str, Any] | None = None, *, choices: FormChoices, **kwargs: Any
    ) -> None:
        super().__init__(data, **kwargs)
        fields = self.fields
        self._set(fields["project"], choices.projects)
        self._set(fields["offering"], [("", "Custom"), *choices.offerings])
        for name in MODEL_FIELDS:
            unset = "any" if name == MODEL_FIELDS[0] else "none"
            self._set(fields[name], [("", unset), *choices.gpu_models])
        self._set(fields["priority_class"], choices.priority_classes)

    @staticmethod
    def _set(field: forms.Field, options: list[tuple[str, str]]) -> None:
        field.choices = options  # type: ignore[attr-defined]

    def request_data(self) -> dict[str, Any]:
        """The API's request body for what was posted (call once the form is valid): only
        what was given, so the API's defaults apply to the rest."""
        given = self.cleaned_data
        data: dict[str, Any] = {"project": given["project"], "name": given["name"]}
        models = [given[name] for name in MODEL_FIELDS if given[name]]
        command = [line for line in given["command"].splitlines() if line.strip()]
        fields: dict[str, Any] = {
            "quantity": given["quantity"],
            "runtime_estimate_s": given["runtime_estimate_s"],
            "priority_class": given["priority_class"],
            "command": command or None,
            "image": given["image"].strip() or None,
        }
        if given["offering"]:
            data["offering"] = given["offering"]
            if models:
                data["gpu_model"] = models[0]
        else:
            fields.update(
                gpu_models=models,
                gpus_per_node=given["gpus_per_node"],
                nodes=given["nodes"],
                min_nodes=given["min_nodes"],
                gpu_milli=given["gpu_milli"],
                topology=given["topology"],
                preemptible=given["preemptible"],
            )
            del fields["quantity"]
        data.update({k: v for k, v in fields.items() if v is not None})
        return data

    def array_count(self) -> int | None:
        """How many copies to submit as an array (call once the form is valid); None: one
        workload, alone."""
        count: int | None = self.cleaned_data["count"]
        return count if count is not None and count > 1 else None

    def refused(self, errors: Mapping[str, Any]) -> None:
        """Show the API's field errors (a serializer's) beside their inputs."""
        for field, problems in errors.items():
            for message in _messages(problems):
                self._show(field, message)

    def refused_by(self, error: ApplicationError) -> None:
        """Show a service's refusal beside each input it names (else above the form)."""
        named = [f for f in error.fields if SHOWN_AT.get(f, f) in self.fields]
        if not named:
            self.add_error(None, error.message)
        for field in named:
            self._show(field, error.message)

    def _show(self, field: str, message: str) -> None:
        shown = SHOWN_AT.get(field, field)
        if field == "non_field_errors":
            self.add_error(None, message)
        elif shown in self.fields:
            self.add_error(shown, message)
        else:
            self.add_error(None, f"{field}: {message}")


def _messages(problems: Any) -> list[str]:
    """A serializer's errors of one field, flat (a list's are by the index of the item)."""
    if isinstance(problems, Mapping):
        return [m for nested in problems.values() for m in _messages(nested)]
    if isinstance(problems, list | tuple):
        return [m for item in problems for m in _messages(item)]
    return [str(problems)]
