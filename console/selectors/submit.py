"""What the new-workload form offers (the member's projects, the catalog's offerings, GPU
models, priority classes), and the engine's codes for why work waits, in plain words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from billing.money import Money
from catalog.models import OfferingKind
from catalog.selectors import offering_list
from console.guard import Console
from inventory.models import GpuModel
from scheduler.models import PriorityClass
from scheduler.selectors import BUILTIN_PRIORITY_CLASSES
from scheduler.services import AsAsked, ModelEstimate
from scheduler.services.what_if import duration_in_words
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
    "outside_reservation": "Its reservation is not open for it now",
    "reservation_full": "Its reservation's GPUs are in use",
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


# What each basis of an estimate means, as the what-if's table says it.
BASIS_WORDS = {
    "runtime_estimates": "the runtime estimates of the work ahead",
    "learned_runtimes": "runtimes learned from past runs",
    "default_runtimes": "typical runtimes (no history yet)",
    "reservation": "a reservation's window",
    "head_of_line": "work ahead of it in the line",
    "quota": "the project's quota",
}


@dataclass(frozen=True)
class EstimateRow:
    """One GPU model's answer in words: where, when, between when, on what, at what price."""

    gpu_model: str
    cluster: str
    when: str
    range: str
    rests_on: str
    price: str
    never: bool


def estimate_rows(answers: list[ModelEstimate]) -> list[EstimateRow]:
    """The what-if's answers as the form's table shows them (no query)."""
    rows = []
    for answer in answers:
        if answer.never is not None:
            when, span = f"Never: {answer.never}", ""
        elif answer.starts_now:
            when, span = "Now", ""
        elif answer.start is None or answer.wait_s is None:
            when, span = "Not within the forecast (a week)", ""
        else:
            when = f"In about {duration_in_words(answer.wait_s)}, at {answer.start:%H:%M} UTC"
            latest = f"{answer.latest:%H:%M}" if answer.latest else "beyond a week"
            early = answer.earliest or answer.start
            span = f"{early:%H:%M} to {latest} UTC"
        if answer.price_per_hour_minor is None or answer.currency is None:
            price = "no price listed"
        else:
            price = f"{Money(answer.currency, answer.price_per_hour_minor).format()} an hour"
        rests = [BASIS_WORDS[b] for b in answer.basis if b in BASIS_WORDS]
        rows.append(
            EstimateRow(
                gpu_model=answer.gpu_model,
                cluster=answer.cluster or "none",
                when=when,
                range=span,
                rests_on=", ".join(rests),
                price=price,
                never=answer.never is not None,
            )
        )
    return rows


def as_asked_words(answer: AsAsked) -> str:
    """When the form as it stands would start once submitted (all its GPU models), in words."""
    models = " or ".join(answer.gpu_models) or "any GPU model"
    if answer.starts_now:
        when = "now"
    elif answer.start is None or answer.wait_s is None:
        when = "never" if "never" in answer.basis else "not within the forecast (a week)"
    else:
        when = f"in about {duration_in_words(answer.wait_s)}, at {answer.start:%H:%M} UTC"
    return f"Submitted as asked ({models}, on {answer.cluster}): {when}."
