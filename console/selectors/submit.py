"""What the new-workload form offers (the member's projects, the catalog's offerings, GPU
models, priority classes), and the engine's codes for why work waits, in plain words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from catalog.models import OfferingKind
from catalog.selectors import offering_list
from console.guard import Console
from inventory.models import GpuModel
from scheduler.models import PriorityClass
from scheduler.selectors import BUILTIN_PRIORITY_CLASSES
from tenants.access import Action
from tenants.models import Project

Choices = list[tuple[str, str]]

# A headline for each of the engine's pending-reason codes (``ReasonCode``); the engine's own
# sentence, with its figures, follows it.
REASON_HEADLINES = {
    "no_matching_model": "No node of this cluster has these GPU models",
    "fragmented": "The free GPUs are spread over too many nodes",
    "insufficient_capacity": "Not enough free GPUs right now",
    "quota": "The project's quota is in use",
    "gang": "Not enough nodes free at once for the gang",
    "reserved": "The free GPUs are held for a reservation",
    "behind_higher_priority": "Other work that needs the same GPUs goes first",
    "topology": "The topology asked for cannot be met",
}


@dataclass(frozen=True)
class FormChoices:
    projects: Choices
    offerings: Choices
    gpu_models: Choices
    shareable_models: frozenset[str]
    priority_classes: Choices


def form_choices(console: Console) -> FormChoices:
    """Four queries, however many rows."""
    projects = console.scoped(Project.objects.all(), Action.PROJECT_READ).order_by("name")
    offerings = offering_list(actor=console.actor).exclude(kind=OfferingKind.RESERVED)
    models = list(GpuModel.objects.order_by("slug"))
    classes = dict(BUILTIN_PRIORITY_CLASSES)
    classes.update({c.name: (c.value, c.preemptible) for c in PriorityClass.objects.all()})
    return FormChoices(
        projects=[(str(p.pk), p.name) for p in projects],
        offerings=[(o.slug, f"{o.name} ({o.slug})") for o in offerings.order_by("slug")],
        gpu_models=[(m.slug, f"{m.name} ({m.slug})") for m in models],
        shareable_models=frozenset(m.slug for m in models if m.shareable),
        priority_classes=[
            (name, f"{name} ({value}{', preemptible' if preemptible else ''})")
            for name, (value, preemptible) in sorted(classes.items(), key=lambda c: -c[1][0])
        ],
    )


def reason_words(reason: Mapping[str, object]) -> tuple[str, list[tuple[str, str]]]:
    """A pending reason's headline, and its figures as label and value (nested ones, each
    model's own reason, are in the engine's sentence already)."""
    code = str(reason["code"])
    figures = reason.get("figures")
    shown: list[tuple[str, str]] = []
    for key, value in (figures if isinstance(figures, Mapping) else {}).items():
        if isinstance(value, Mapping):
            continue
        if isinstance(value, list | tuple):
            value = ", ".join(str(v) for v in value) or "none"
        shown.append((str(key).replace("_", " "), str(value)))
    return REASON_HEADLINES.get(code, code.replace("_", " ")), shown
