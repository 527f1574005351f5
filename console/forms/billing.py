"""Billing's forms: a card (a Stripe PaymentMethod id, from Stripe.js) and a budget."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from metering.serializers import MAX_BUDGET_GPU_HOURS
from tenants.models import Organization, Project

# The test PaymentMethods of Stripe's documentation, for simulated payments (no Stripe.js).
TEST_CARD = "pm_card_visa"


class CardForm(forms.Form):
    payment_method = forms.CharField(
        max_length=64,
        validators=[
            RegexValidator(r"^(pm|card|src)_[A-Za-z0-9_]+$", "not a Stripe PaymentMethod id")
        ],
    )


class ProjectChoice(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Project) -> str:
        return obj.name  # a project's own str() reads its organization: a query per option


class BudgetForm(forms.Form):
    project = ProjectChoice(
        queryset=Project.objects.none(),
        required=False,
        empty_label="The whole organization",
        help_text="A project's budget alerts; only the organization's can stop new work.",
    )
    gpu_hours = forms.DecimalField(
        label="GPU-hours a month",
        max_digits=15,
        decimal_places=3,
        min_value=Decimal("0.001"),
        max_value=Decimal(MAX_BUDGET_GPU_HOURS),
    )
    hard_stop = forms.BooleanField(
        label="Refuse new work once spent (the organization's budget only)", required=False
    )

    def __init__(self, *args: Any, organization: Organization, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        projects = Project.objects.filter(organization=organization).order_by("name")
        self.fields["project"].queryset = projects  # type: ignore[attr-defined]
