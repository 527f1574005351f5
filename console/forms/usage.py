"""The month a usage page shows."""

from __future__ import annotations

from datetime import date

from django import forms

FIRST = date(1970, 1, 1)
LAST = date(8999, 12, 1)


class MonthForm(forms.Form):
    """``?month=YYYY-MM`` (the page draws its own ``<input type="month">``)."""

    month = forms.DateField(label="Month", input_formats=["%Y-%m"], required=False)

    def clean_month(self) -> date | None:
        month: date | None = self.cleaned_data["month"]
        if month is not None and not FIRST <= month <= LAST:
            raise forms.ValidationError("out of range")
        return month

    def chosen(self, default: date) -> date:
        """The month asked for, else ``default`` (also when the input is not a month)."""
        if self.is_valid() and self.cleaned_data["month"]:
            month: date = self.cleaned_data["month"]
            return month
        return default.replace(day=1)
